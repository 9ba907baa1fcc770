"""The DFlash drafter a training run starts from (`graftlib.training.drafter.dflash_train` trains it): the run's
`TrainConfig`, a fresh drafter shaped like one target layer (`make_drafter`, optionally started from the target's
own layer), a trained drafter as a warm start (`warm_drafter`: its weights and draft vocabulary, layers grown and
DFlash 2's parts added to the run's shape).

Invariants: a warm start's added parts start as functions that change nothing (the convolution as the identity,
the anchor context at zero, a grown layer as the identity), so the warm drafter drafts as it did before training
(tests/test_drafter_extensions.py).
"""

import json
from dataclasses import dataclass, replace

import torch

from graftlib.core.errors import require
from graftlib.models.dflash2 import SELECTOR_PREFIX
from graftlib.models.drafter import EMBEDDED_DRAFTER_DIR, DFlashConfig, DFlashDrafter, init_weights, load_drafter
from graftlib.training.drafter.samples import target_layer_shape
from graftlib.training.drafter.trainer import LoopConfig


@dataclass
class TrainConfig(LoopConfig):
    layers: int = 1
    block_size: int | None = None  # None: the embedded drafter's (16)
    mask_token_id: int | None = None  # None: the embedded drafter's
    gamma: float = 7.0  # depth decay of the loss weights exp(-(k - 1) / gamma) (DFlash's 7 for block 16)
    init_from_target: bool = False  # measured: worse at equal time (ablation.json)
    init_drafter: str | None = None  # warm start: a trained drafter's weights, layers and draft vocabulary
    fc_init: str = "last"  # "last": identity on the deepest stored layer; "random"
    # the drafter's own LM head, trained (DFlashConfig.draft_head; starts as the target's rows)
    draft_head: bool = False
    anchor_context: bool = False  # the anchor-context input path (DFlashConfig.anchor_context; starts at zero)
    conv_kernel_size: int = 0  # DFlash 2's convolution taps (0: none; starts as the identity)
    selector_rank: int = 0  # DFlash 2's selector rank (0: none)
    selector_top_k: int = 16  # the selector's candidates per position
    selector_alpha: float = 1.0  # weight of the selector's loss
    parts_only: bool = False  # a warm start trains DFlash 2's parts alone, the drafter's other weights frozen
    tau_prompts: int = 4
    tau_tokens: int = 64

    def check(self) -> None:
        super().check()
        require(self.layers >= 1, f"layers must be >= 1, got {self.layers}")
        require(self.gamma > 0, f"gamma must be > 0, got {self.gamma}")
        require(self.fc_init in ("last", "random"), f"fc_init {self.fc_init!r} is not 'last' or 'random'")
        require(not (self.init_drafter and self.init_from_target),
                "init_drafter and init_from_target are two different starts: give one")
        require(self.conv_kernel_size >= 0 and self.selector_rank >= 0 and self.selector_top_k >= 2,
                "conv_kernel_size and selector_rank must be >= 0 and selector_top_k >= 2")
        require(not self.parts_only or (self.init_drafter and (self.conv_kernel_size or self.selector_rank)),
                "parts_only trains DFlash 2's parts of a warm start: give init_drafter and a part")


def embedded_defaults() -> DFlashConfig:
    return DFlashConfig.from_dict(json.loads((EMBEDDED_DRAFTER_DIR / "config.json").read_text()))


def drafter_config(target_config, cfg: TrainConfig, layer_ids: list[int], draft_vocab_size: int | None) -> DFlashConfig:
    """A drafter shaped like one target layer (so it can start from one), block/mask from cfg."""
    tc, base = target_config, embedded_defaults()
    return DFlashConfig(
        **target_layer_shape(tc), num_hidden_layers=cfg.layers,
        block_size=cfg.block_size or base.block_size,
        mask_token_id=base.mask_token_id if cfg.mask_token_id is None else cfg.mask_token_id,
        target_layer_ids=list(layer_ids), num_target_layers=tc.num_hidden_layers,
        draft_vocab_size=draft_vocab_size, draft_head=cfg.draft_head, anchor_context=cfg.anchor_context,
        **dflash2_parts(cfg),
    )


def dflash2_parts(cfg: TrainConfig) -> dict:
    """The DFlashConfig keys of the DFlash 2 parts `cfg` asks for."""
    return {"conv_kernel_size": cfg.conv_kernel_size or None, "selector_rank": cfg.selector_rank or None,
            "selector_top_k": cfg.selector_top_k}


@torch.no_grad()
def init_from_target(drafter: DFlashDrafter, target, fc_init: str) -> None:
    """Drafter layer i <- target layer L - n + i; final norm <- target's; fc as in the module doc."""
    layers = target.model.layers
    n = len(drafter.layers)
    for i, layer in enumerate(drafter.layers):
        src = layers[len(layers) - n + i].state_dict()
        for name, p in layer.named_parameters():
            if name in src:
                require(src[name].shape == p.shape, f"cannot start drafter layer from target: {name} "
                                                    f"{tuple(src[name].shape)} != {tuple(p.shape)}")
                p.copy_(src[name])
            else:
                assert name.endswith(("q_norm.weight", "k_norm.weight")), name
                p.fill_(1.0)
    drafter.norm.weight.copy_(target.model.norm.weight)
    if fc_init == "last":
        cfg = drafter.config
        deepest = max(range(len(cfg.target_layer_ids)), key=lambda j: cfg.target_layer_ids[j])
        h = cfg.hidden_size
        drafter.fc.weight.zero_()
        drafter.fc.weight[:, deepest * h:(deepest + 1) * h] = torch.eye(h)
        nxt = min(cfg.target_layer_ids[deepest] + 1, len(layers) - 1)
        drafter.hidden_norm.weight.copy_(layers[nxt].input_layernorm.weight)


def make_drafter(cfg: TrainConfig, target, layer_ids: list[int], d2t: torch.Tensor | None) -> DFlashDrafter:
    torch.manual_seed(cfg.seed)
    drafter = DFlashDrafter(drafter_config(target.config, cfg, layer_ids, len(d2t) if d2t is not None else None))
    init_weights(drafter)
    if cfg.init_from_target:
        init_from_target(drafter, target, cfg.fc_init)
    if d2t is not None:
        drafter.d2t.copy_(d2t)
    start_parts(drafter, target)
    return drafter.float().train()


@torch.no_grad()
def start_parts(drafter: DFlashDrafter, target, parts: tuple[str, ...] = ("lm_head", "anchor_proj")) -> None:
    """The extension parts named in `parts` that the drafter has, at their start: its own head = the
    target's rows of its draft vocabulary, `anchor_proj` = 0 (the input path adds nothing until trained)."""
    if "lm_head" in parts and drafter.config.draft_head:
        rows = drafter.d2t if drafter.config.draft_vocab_size else slice(None)
        drafter.lm_head.weight.copy_(target.lm_head.weight[rows])
    if "anchor_proj" in parts and drafter.config.anchor_context:
        drafter.anchor_proj.weight.zero_()


@torch.no_grad()
def add_parts(drafter: DFlashDrafter, target, cfg: TrainConfig) -> DFlashDrafter:
    """`drafter` with the extension parts `cfg` asks for and it lacks added at their start (`start_parts`;
    DFlash 2's convolutions as the identity, its selector as `init_weights` draws it), computing exactly what it
    computed: a warm start tests them at equal time from a trained drafter."""
    c = drafter.config
    want = replace(c, draft_head=c.draft_head or cfg.draft_head, anchor_context=c.anchor_context or cfg.anchor_context,
                   conv_kernel_size=c.conv_kernel_size or cfg.conv_kernel_size or None,
                   selector_rank=c.selector_rank or cfg.selector_rank or None,
                   selector_top_k=cfg.selector_top_k if cfg.selector_rank and not c.selector_rank else c.selector_top_k)
    if want == c:
        return drafter
    grown = DFlashDrafter(want)
    init_weights(grown)
    missing, unexpected = grown.load_state_dict(drafter.state_dict(), strict=False)
    new = tuple(name for name, added in (("lm_head", want.draft_head and not c.draft_head),
                                         ("anchor_proj", want.anchor_context and not c.anchor_context)) if added)
    allowed = tuple(f"{n}.weight" for n in new)
    require(not unexpected and all(k in allowed or "_conv." in k or k.startswith(SELECTOR_PREFIX)
                                   for k in missing), f"adding parts to the drafter: unexpected {unexpected}, "
            f"missing {missing}")
    start_parts(grown, target, new)
    return grown.to(next(drafter.parameters()).dtype)


@torch.no_grad()
def grow_layers(drafter: DFlashDrafter, n_layers: int) -> DFlashDrafter:
    """`drafter` with layers appended up to `n_layers`, computing exactly what it computed: the new layers
    start as the module doc's random init with their residual outputs (`o_proj`, `down_proj`) at zero, so
    each adds nothing until training moves those. Gradients reach `o_proj` / `down_proj` at once (their
    inputs are the new layer's non-zero attention and MLP activations), and the rest of the layer from the
    step after. This is how a warm start tests a deeper drafter at equal time without paying for the
    shallower one's training again: a one-layer DFlash drafter cannot look up the context with what it
    reads from its own block (no induction, e.g. 'hello, hello, ...' accepts one draft a round), which a
    second layer can in principle (not shown yet: a two-layer drafter grown from the shipped one and
    trained 66 minutes accepted no more there; docs/measurements.md)."""
    cfg = drafter.config
    n_old = cfg.num_hidden_layers
    require(n_layers >= n_old, f"cannot grow a {n_old}-layer drafter to {n_layers} layers")
    require(cfg.layer_types is None, "growing a drafter with per-layer attention types is not supported")
    grown = DFlashDrafter(replace(cfg, num_hidden_layers=n_layers))
    init_weights(grown)
    missing, unexpected = grown.load_state_dict(drafter.state_dict(), strict=False)
    require(not unexpected and all(int(k.split(".")[1]) >= n_old for k in missing),
            f"growing the drafter: unexpected {unexpected}, missing {missing}")
    for layer in grown.layers[n_old:]:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    return grown.to(next(drafter.parameters()).dtype)


def warm_drafter(cfg: TrainConfig, target, layer_ids: list[int]) -> DFlashDrafter:
    """The drafter `cfg.init_drafter` (a path, or "embedded") to train on: its weights and draft vocabulary
    (`d2t`), refused unless its shape is the one `cfg` asks for (layers, draft vocabulary, target layers,
    block, extension parts), so a warm-started run records the settings it actually trained with. Asked for
    more layers than it has, it grows (`grow_layers`: the added layers start as no-ops); asked for an extension
    part it lacks, it gets it at its start (`add_parts`)."""
    drafter, trained = load_drafter(cfg.init_drafter, target.config)
    c = drafter.config
    require(trained, f"init_drafter {cfg.init_drafter}: the directory has no weights to start from")
    vocab = c.draft_vocab_size or 0
    want_vocab = cfg.draft_vocab if 0 < cfg.draft_vocab < target.config.vocab_size else 0
    base = embedded_defaults()
    if c.num_hidden_layers < cfg.layers:
        drafter = grow_layers(drafter, cfg.layers)
    drafter = add_parts(drafter, target, cfg)
    c = drafter.config
    diff = [f"{name} {have} (asked {want})" for name, have, want in (
        ("layers", c.num_hidden_layers, cfg.layers), ("draft vocabulary", vocab, want_vocab),
        ("own draft head", c.draft_head, cfg.draft_head), ("anchor context", c.anchor_context, cfg.anchor_context),
        ("convolution taps", c.conv_kernel_size or 0, cfg.conv_kernel_size),
        ("selector rank", c.selector_rank or 0, cfg.selector_rank),
        ("target layers", list(c.target_layer_ids), list(layer_ids)),
        ("block size", c.block_size, cfg.block_size or base.block_size),
        ("mask token", c.mask_token_id, base.mask_token_id if cfg.mask_token_id is None else cfg.mask_token_id),
    ) if have != want]
    require(not diff, f"init_drafter {cfg.init_drafter} does not have this run's shape: {'; '.join(diff)}")
    return drafter.float().requires_grad_(True).train()
