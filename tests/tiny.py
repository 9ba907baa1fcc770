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
    eagle3_config,
    exactness_dflash2,
    exactness_eagle3,
    exactness_pair,
    exactness_prompts,
    prompts_of,
    random_eagle3,
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


def random_predictor(depth: int, budgets: list[int], seed: int = 0, scale: float = 1.0, rounds=None,
                     ar_bias: float | None = None):
    """A `BudgetPredictor` of random weights for a drafter of `depth` over `budgets` (x_t: 14 state terms, q1 and qk
    per depth, one mass per budget), so `graft+pred` decodes on the tiny pairs; standardized by the features of
    `rounds` (replayed `budget_policy.Rounds`, where given) so that its choices vary from round to round. With
    `ar_bias`, an AR arm of random weights and that intercept (a large one: every round it decides is an AR step)."""
    import numpy as np

    from graftlib.methods.budget_predictor import BudgetPredictor, before_draft

    n = 14 + 2 * depth + len(budgets)
    rng = np.random.default_rng(seed)
    x = rounds.features() if rounds is not None else None
    mu, sd = (x.mean(axis=0), x.std(axis=0) + 1e-6) if x is not None else (np.zeros(n), np.ones(n))
    w = rng.normal(0.0, scale, (n + 1, len(budgets)))
    w[0] = 0.0  # no intercept: the round's features decide
    ar = None
    if ar_bias is not None:
        x0 = before_draft(rounds.last, rounds.state[:, 2], rounds.prefix) if rounds is not None else None
        x0 = x0[~np.isnan(x0[:, 0])] if x0 is not None else None
        ar_mu, ar_sd = (x0.mean(axis=0), x0.std(axis=0) + 1e-6) if x0 is not None else (np.zeros(14), np.ones(14))
        ar = {"mu": ar_mu.tolist(), "sd": ar_sd.tolist(), "w": [ar_bias] + rng.normal(0.0, scale, 14).tolist()}
    return BudgetPredictor(list(budgets), mu.tolist(), sd.tolist(), w.tolist(), {"source": "random (tests)"}, ar)
