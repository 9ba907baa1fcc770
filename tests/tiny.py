"""Tiny random models for fast tests (`graftlib.models.tiny`, re-exported) and the exactness fixture."""

from graftlib.models.tiny import (  # noqa: F401  (re-exported for the tests)
    ARCH_SEEDS,
    CHARS,
    HIDDEN,
    LAYERS,
    MASK_ID,
    MAX_POS,
    VOCAB,
    drafter_config,
    exactness_pair,
    exactness_prompts,
    prompts_of,
    random_prompt,
    target_config,
    tiny_drafter,
    tiny_target,
    tiny_tokenizer,
    write_drafter_dir,
    write_target_dir,
)


def tiny_pairs(prompt_lens: tuple[int, ...] = (1, 9, 23), max_new: int = 37) -> dict:
    """Per architecture: (target, drafter, prompts, greedy AR outputs), the exactness-test fixture."""
    from graftlib.methods.decoder import Decoder

    out = {}
    for arch in ARCH_SEEDS:
        target, drafter = exactness_pair(arch)
        prompts = exactness_prompts(arch, prompt_lens)
        ar = [Decoder.for_method(target, drafter, "ar").decode(p, max_new).tokens for p in prompts]
        out[arch] = (target, drafter, prompts, ar)
    return out
