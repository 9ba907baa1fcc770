"""Tiny random models: targets of both architectures (Llama, Qwen3), a matching DFlash drafter, a tokenizer.

What they are for: the fast exactness fixture of the tests (`tests/tiny.py`) and of the device
check (`graftlib.lab.run.device_check`, on any device), and a stand-in for a user's own pair (a
model directory + a z-lab-layout drafter directory, `write_target_dir` / `write_drafter_dir`)
to try `graft prepare` on in seconds; `exactness_eagle3` adds a random EAGLE-3 drafter for the
AR-drafted methods, `exactness_dflash2` a random DFlash 2 drafter for the selector methods. Vocabulary 32 on purpose:
random drafts are then often right, so trees get multi-node acceptance (and non-contiguous accepted paths) within a few
dozen tokens. Every model is seeded: the same call gives the same weights.
"""

import torch

from graftlib.models.drafter import DFlashConfig, DFlashDrafter, init_weights

VOCAB = 32
HIDDEN = 64
LAYERS = 4
MASK_ID = 31
MAX_POS = 512


def target_config(arch: str = "llama", **overrides):
    from transformers import LlamaConfig, Qwen3Config

    common = {
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 128, "num_hidden_layers": LAYERS,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": MAX_POS, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    }
    common.update(overrides)
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen3":
        return Qwen3Config(**common)
    raise ValueError(arch)


def tiny_target(arch: str = "llama", seed: int = 0, **overrides):
    """A random float32 causal LM with SDPA attention, in eval mode."""
    from transformers import AutoModelForCausalLM

    cfg = target_config(arch, **overrides)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    return model.eval().requires_grad_(False)


def drafter_config(**overrides) -> DFlashConfig:
    kw = {
        "hidden_size": HIDDEN, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": VOCAB, "block_size": 8,
        "mask_token_id": MASK_ID, "target_layer_ids": [0, 2], "num_target_layers": LAYERS,
    }
    kw.update(overrides)
    return DFlashConfig(**kw)


def tiny_drafter(seed: int = 0, **overrides) -> DFlashDrafter:
    torch.manual_seed(seed)
    drafter = DFlashDrafter(drafter_config(**overrides))
    init_weights(drafter)
    return drafter.eval().requires_grad_(False)


def random_prompt(seed: int, length: int, vocab: int = VOCAB,
                  exclude: tuple[int, ...] = (MASK_ID,)) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([t for t in range(vocab) if t not in exclude])
    return allowed[torch.randint(len(allowed), (length,), generator=g)].tolist()


def prompts_of(lengths: list[int], seed: int = 0) -> list[list[int]]:
    """One random prompt per length (seeds seed, seed + 1, ...)."""
    return [random_prompt(seed + i, n) for i, n in enumerate(lengths)]


CHARS = "abcdefghijklmnopqrstuvwxyz .,!?"  # 31 characters -> ids 0..30; id 31 = "<eos>" (also the mask id)


def tiny_tokenizer():
    """A character-level fast tokenizer over the 32-token vocabulary, with a trivial chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(CHARS)}
    vocab["<eos>"] = VOCAB - 1
    tk = Tokenizer(models.WordLevel(vocab, unk_token="?"))
    tk.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tk.decoder = decoders.Fuse()  # characters join without spaces: decode(encode(text)) == text
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", unk_token="?")
    tok.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}.{% endif %}")
    return tok


def write_target_dir(path, arch: str = "llama", seed: int = 0, tokenizer: bool = True, **overrides):
    """Save a tiny target (safetensors + config, optionally a tokenizer) as a local model directory."""
    model = tiny_target(arch, seed=seed, **overrides)
    model.save_pretrained(path)
    if tokenizer:
        tiny_tokenizer().save_pretrained(path)
    return path


def write_drafter_dir(path, seed: int = 0, **overrides):
    from graftlib.models.drafter import save_drafter

    save_drafter(tiny_drafter(seed=seed, **overrides), path)
    return path


ARCH_SEEDS = {"llama": 0, "qwen3": 1}


def exactness_pair(arch: str) -> tuple:
    """The seeded (target, drafter) of one architecture for exactness checks: a target with
    initializer_range 0.1 (peaky enough that random drafts are often accepted) and its drafter."""
    seed = ARCH_SEEDS[arch]
    return tiny_target(arch, seed=seed, initializer_range=0.1), tiny_drafter(seed=seed)


def exactness_dflash2(arch: str) -> DFlashDrafter:
    """A random DFlash 2 drafter for one architecture's exactness checks (the selector methods): both parts, the
    convolutions and the selector drawn strong enough (N(0, 1) codes) to change the chain and the trees."""
    drafter = tiny_drafter(seed=ARCH_SEEDS[arch], conv_kernel_size=2, conv_group_size=16, selector_rank=8,
                           selector_top_k=6)
    with torch.no_grad():
        sel = drafter.candidate_selector
        for p in (sel.predecessor_codebook, sel.successor_codebook, sel.hidden_projection.weight):
            p.normal_(std=1.0)
        for layer in drafter.layers:
            layer.mlp_conv.kernel_projection.weight.normal_(std=0.1)
    return drafter


def exactness_prompts(arch: str, lengths: tuple[int, ...] = (1, 9, 23)) -> list[list[int]]:
    """The seeded prompts (token ids) of one architecture's exactness checks, one per length."""
    return [random_prompt(100 * ARCH_SEEDS[arch] + j, n) for j, n in enumerate(lengths)]


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


EAGLE3_SEEDS = {"llama": 3, "qwen3": 0}  # random EAGLE-3 drafters whose trees get paths of 3+ tokens accepted


def exactness_eagle3(target, arch: str):
    """The seeded random EAGLE-3 drafter of one architecture's exactness checks, for `target`."""
    return random_eagle3(eagle3_config(target.config), target.config, seed=EAGLE3_SEEDS[arch])
