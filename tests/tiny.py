"""Tiny random models for fast tests (`graftlib.models.tiny`, re-exported) and the exactness fixture."""

import torch

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


def eagle3_config(target_cfg, draft_vocab: int = 24, layer_ids=(0, 1, 3), **overrides):
    """A tiny EAGLE-3 config for `target_cfg`: hidden 48 (not 3 x the target's, so fc is used)."""
    from graftlib.models.eagle3 import Eagle3Config

    kw = {"hidden_size": 48, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 12, "vocab_size": target_cfg.vocab_size, "draft_vocab_size": draft_vocab,
          "target_hidden_size": target_cfg.hidden_size, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
          "target_layer_ids": list(layer_ids)}
    kw.update(overrides)
    return Eagle3Config(**kw)


def random_eagle3(cfg, target_cfg, seed: int = 0, std: float = 0.3, embed: torch.Tensor | None = None):
    """A random-init EAGLE-3 drafter (exactness does not depend on its quality): weights N(0, std^2)
    (std 0.3 on tiny models gives peaked, hence deep, draft trees), norms at 1, and a reduced draft
    vocabulary mapped to a random subset of the target ids through `d2t` offsets."""
    from graftlib.models.eagle3 import Eagle3Drafter

    g = torch.Generator().manual_seed(seed)
    model = Eagle3Drafter(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)
        if embed is not None:
            model.embed_tokens.weight.copy_(embed)
        ids = torch.randperm(cfg.vocab_size, generator=g)[:cfg.draft_vocab_size].sort().values
        model.d2t.copy_(ids - torch.arange(cfg.draft_vocab_size))
        model.t2d.zero_()
        model.t2d[ids] = True
    return model.fit(target_cfg).eval().requires_grad_(False)


def write_eagle3_dir(path, model, embed: bool = False):
    """Save an EAGLE-3 drafter in the release's layout (config.json + model.safetensors); without
    `embed` the checkpoint has no embed_tokens (the loader then takes the target's)."""
    import json
    from dataclasses import asdict

    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    cfg = dict(asdict(model.config), architectures=["LlamaForCausalLMEagle3"], model_type="llama",
               hidden_act="silu", num_hidden_layers=1)
    (path / "config.json").write_text(json.dumps(cfg))
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if embed or k != "embed_tokens.weight"}
    save_file(state, path / "model.safetensors")
    return path
