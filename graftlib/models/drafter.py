"""DFlash drafter: graftlib's own implementation, loading z-lab checkpoints without remote code.

One forward predicts a whole block (z-lab/dflash conventions): the context is the target's hidden states after
`target_layer_ids`, concatenated, through `hidden_norm(fc(x))`; the block `[anchor, mask x (block_size - 1)]` is
embedded with the target's frozen embedding; each Qwen3-style layer takes queries from the block and keys /
values from context + block (bidirectional in the block; sliding-window layers causal); the output goes
through the drafter's `norm` and the target's LM head (optionally a reduced draft vocabulary, `draft_vocab`).
Block position k predicts the token at `start + k`: outputs 1..D are the drafts of depths 1..D.

graftlib extensions (`dflash_config` keys, absent = off, so z-lab checkpoints load as they are): `draft_head`
(the drafter's own trained LM head) and `anchor_context` (each block position's input adds a projection of
the anchor's predecessor's context feature and the anchor's embedding; zero at a warm start).

State: the context K/V (already rotated) lives in an explicit `DraftCache` passed to every call,
never on the module. A draft call appends the new context's K/V and discards the block's
(the z-lab "crop back to start"), so the cache always covers exactly the committed prefix.

DFlash 2 (`architectures: ["DFlash2DraftModel"]`): the same drafter with `graftlib.models.dflash2`'s block-local
convolution and candidate selector, either of which may be present alone in a graftlib checkpoint.

Checkpoints: `config.json` + `*.safetensors` with the z-lab names (no embed_tokens, no lm_head); loading names
missing, unexpected and mis-shaped tensors. A selector may ship alone (`selector_of` names its drafter).

Details: docs/internals.md, `graftlib.models.drafter`.
"""

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR
from graftlib.models.dflash2 import BlockConv, CandidateSelector, unpack_selector
from graftlib.models.drafter_layers import DecoderLayer, RMSNorm, rope_cos_sin

EMBEDDED_DRAFTER = "embedded"
EMBEDDED_DRAFTER_DIR = ASSETS_DIR / "drafters" / "smollm2-135m-dflash"
# the embedded drafter's drafts with a DFlash 2 selector trained on them (`graft ship-dflash2`)
EMBEDDED_DFLASH2 = "embedded-dflash2"
EMBEDDED_DFLASH2_DIR = ASSETS_DIR / "drafters" / "smollm2-135m-dflash2"
EMBEDDED_DRAFTERS = {EMBEDDED_DRAFTER: EMBEDDED_DRAFTER_DIR, EMBEDDED_DFLASH2: EMBEDDED_DFLASH2_DIR}


@dataclass
class DFlashConfig:
    """The keys a z-lab DFlash config.json carries (Qwen3 keys + the dflash ones)."""

    hidden_size: int = 576
    intermediate_size: int = 1536
    num_hidden_layers: int = 1
    num_attention_heads: int = 9
    num_key_value_heads: int = 3
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    vocab_size: int = 49152
    max_position_embeddings: int = 8192
    block_size: int = 16
    mask_token_id: int = 16
    target_layer_ids: list[int] = field(default_factory=lambda: [2, 15, 28])
    num_target_layers: int = 30
    layer_types: list[str] | None = None  # "full_attention" | "sliding_attention" per layer
    sliding_window: int | None = None
    is_causal: bool | None = None  # None: sliding layers causal, full ones bidirectional (module doc)
    input_embedding_scale: float = 1.0
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    # graftlib extensions (absent in z-lab checkpoints; module doc): the draft LM head's target-id rows,
    # the drafter's own trained head, the anchor-context input path.
    draft_vocab_size: int | None = None
    draft_head: bool = False
    anchor_context: bool = False
    # DFlash 2 (module doc): the convolution's taps and channels per dynamic kernel, the selector's rank and top-k
    conv_kernel_size: int | None = None
    conv_group_size: int = 16
    selector_rank: int | None = None
    selector_top_k: int = 16
    # graftlib extension: this checkpoint holds a selector alone (`SELECTOR_FILE`, `dflash2.pack_selector`) that
    # completes the drafter weights in this directory, relative to the checkpoint's own
    selector_of: str | None = None

    @property
    def architecture(self) -> str:
        return "DFlash2DraftModel" if self.conv_kernel_size or self.selector_rank else "DFlashDraftModel"

    @property
    def num_drafts(self) -> int:
        return self.block_size - 1

    @classmethod
    def from_dict(cls, d: dict) -> "DFlashConfig":
        dc = d.get("dflash_config") or {}
        archs = d.get("architectures") or ["DFlashDraftModel"]
        require(archs[0] in ("DFlashDraftModel", "DFlash2DraftModel"),
                f"drafter architecture {archs[0]!r} is not supported (DFlashDraftModel or DFlash2DraftModel)")
        conv, rank = dc.get("conv_kernel_size", d.get("conv_kernel_size")), dc.get("selector_rank",
                                                                                   d.get("selector_rank"))
        require(archs[0] == "DFlashDraftModel" or conv or rank,
                "a DFlash2DraftModel config names neither conv_kernel_size nor selector_rank in dflash_config")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        require(rope_type == "default", f"drafter rope_type {rope_type!r} is not supported (only 'default')")
        n_target = d.get("num_target_layers")
        layer_ids = dc.get("target_layer_ids", d.get("target_layer_ids"))
        n_layers = d["num_hidden_layers"]
        if layer_ids is None:
            require(n_target is not None, "drafter config has neither target_layer_ids nor num_target_layers")
            layer_ids = default_target_layer_ids(n_target, n_layers)
        heads = d["num_attention_heads"]
        return cls(
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_hidden_layers=n_layers,
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", d.get("rope_theta", 10000.0)),
            vocab_size=d["vocab_size"],
            max_position_embeddings=d.get("max_position_embeddings", 32768),
            block_size=int(dc.get("block_size", d.get("block_size", 16))),
            mask_token_id=dc.get("mask_token_id", d.get("mask_token_id")),
            target_layer_ids=list(layer_ids),
            num_target_layers=n_target if n_target is not None else max(layer_ids) + 1,
            layer_types=d.get("layer_types"),
            sliding_window=d.get("sliding_window") if d.get("layer_types") and d.get("use_sliding_window", True)
            else None,
            is_causal=d.get("is_causal"),
            input_embedding_scale=float(dc.get("input_embedding_scale", d.get("input_embedding_scale", 1.0))),
            output_multiplier=float(dc.get("output_multiplier", d.get("output_multiplier", 1.0))),
            final_logit_softcapping=dc.get("final_logit_softcapping", d.get("final_logit_softcapping")),
            draft_vocab_size=dc.get("draft_vocab_size"),
            draft_head=bool(dc.get("draft_head", False)),
            anchor_context=bool(dc.get("anchor_context", False)),
            conv_kernel_size=conv,
            conv_group_size=int(dc.get("conv_group_size", d.get("conv_group_size", 16))),
            selector_rank=rank,
            selector_top_k=int(dc.get("selector_top_k", d.get("selector_top_k", 16))),
            selector_of=dc.get("selector_of"),
        )

    def to_dict(self) -> dict:
        """The z-lab config.json layout (graftlib extras inside dflash_config)."""
        d = asdict(self)
        dflash = {"mask_token_id": d.pop("mask_token_id"), "target_layer_ids": d.pop("target_layer_ids")}
        defaults = {"input_embedding_scale": 1.0, "output_multiplier": 1.0,
                    "final_logit_softcapping": None, "draft_vocab_size": None,
                    "draft_head": False, "anchor_context": False, "conv_kernel_size": None, "conv_group_size": 16,
                    "selector_rank": None, "selector_top_k": 16, "selector_of": None}
        for key, default in defaults.items():
            value = d.pop(key)
            if value != default:
                dflash[key] = value
        if self.conv_kernel_size:
            dflash["conv_group_size"] = self.conv_group_size
        if self.selector_rank:
            dflash["selector_top_k"] = self.selector_top_k
        for key in ("layer_types", "sliding_window", "is_causal"):
            if d[key] is None:
                d.pop(key)
        rope_theta = d.pop("rope_theta")
        return {
            "architectures": [self.architecture], "model_type": "qwen3", **d,
            "rope_theta": rope_theta, "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False, "dflash_config": dflash,
        }


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab default: an even spread from layer 1 to num_target_layers - 3 (middle layer if one)."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    lo, hi = 1, num_target_layers - 3
    return [lo + round(i * (hi - lo) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


@dataclass
class DraftCache:
    """Per-layer rotated context K/V [1, kv, ctx_len, hd]; ctx_len = committed tokens seen."""

    keys: list[torch.Tensor | None]
    values: list[torch.Tensor | None]
    ctx_len: int = 0

    @classmethod
    def empty(cls, num_layers: int) -> "DraftCache":
        return cls([None] * num_layers, [None] * num_layers, 0)


class DFlashDrafter(nn.Module):
    """Module tree and parameter names match z-lab's DFlashDraftModel state dict."""

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        self.config = cfg
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.layers = nn.ModuleList([DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.draft_vocab_size:
            # draft id -> target id; a buffer saved with the checkpoint (graftlib extension).
            self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        if cfg.draft_head:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size or cfg.vocab_size, bias=False)
        if cfg.anchor_context:
            self.anchor_proj = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        if cfg.selector_rank:
            self.candidate_selector = CandidateSelector(cfg.vocab_size, cfg.hidden_size, cfg.selector_rank,
                                                        cfg.selector_top_k)

    @property
    def block_size(self) -> int:
        return self.config.block_size

    def context_features(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """HF hidden_states (index 0 = embeddings) -> [b, n, len(layer_ids) * H]."""
        return torch.cat([hidden_states[i + 1] for i in self.config.target_layer_ids], dim=-1)

    def new_cache(self) -> DraftCache:
        """An empty context cache for one decode (what the decode loop starts from)."""
        return DraftCache.empty(len(self.layers))

    def forward(self, noise_embedding: torch.Tensor, target_hidden: torch.Tensor, start: int,
                cache: DraftCache | None = None, block_mask: torch.Tensor | None = None,
                ctx_positions: torch.Tensor | None = None, q_positions: torch.Tensor | None = None) -> torch.Tensor:
        """Block hidden states after the final norm.

        noise_embedding [b, q, H]: embedded block at positions [start, start+q);
        target_hidden [b, c, F]: context features at positions [start-c, start) not yet cached.
        With a cache, its K/V cover positions [0, start-c) and are extended by the new context.

        Training packs several blocks per row: `ctx_positions` [b, c] and `q_positions` [b, q]
        then give every context / block position its RoPE position explicitly (`start` is
        ignored, no cache), and `block_mask` [b, 1, q, c + q] says which keys each query sees.
        """
        cfg = self.config
        ctx = self.hidden_norm(self.fc(target_hidden))
        c, q_len = ctx.shape[1], noise_embedding.shape[1]
        if ctx_positions is None and q_positions is None:
            positions = torch.arange(start - c, start + q_len, device=ctx.device)
            cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, noise_embedding.dtype)
        else:
            require(ctx_positions is not None and q_positions is not None and cache is None,
                    "explicit drafter positions need both ctx_positions and q_positions, and no cache")
            positions = torch.cat([ctx_positions, q_positions], dim=-1)
            cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, noise_embedding.dtype)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [b, 1, c + q, hd]: shared by all heads
        h = noise_embedding
        if cfg.anchor_context:
            h = h + self.anchor_input(noise_embedding, ctx, ctx_positions, q_positions)
        for i, layer in enumerate(self.layers):
            past_k = cache.keys[i] if cache is not None else None
            past_v = cache.values[i] if cache is not None else None
            h, k_ctx, v_ctx = layer(h, ctx, cos, sin, past_k, past_v, block_mask)
            if cache is not None:
                cache.keys[i] = k_ctx if past_k is None else torch.cat([past_k, k_ctx], dim=2)
                cache.values[i] = v_ctx if past_v is None else torch.cat([past_v, v_ctx], dim=2)
        if cache is not None:
            cache.ctx_len = start
        return self.norm(h)

    def anchor_input(self, noise_embedding: torch.Tensor, ctx: torch.Tensor, ctx_positions: torch.Tensor | None,
                     q_positions: torch.Tensor | None) -> torch.Tensor:
        """`anchor_proj(cat(ctx[a - 1], e_a))` for each block query [b, q, H], `a` its block's anchor.

        Decoding (one block, `q_positions` None): `a` = start, its context row the last new one.
        Packed training: blocks of `block_size` side by side, block j's anchor at query j * block_size,
        context rows at consecutive positions from `ctx_positions[:, 0]` (`pack_blocks`: arange(C))."""
        b, q_len, H = noise_embedding.shape
        require(ctx.shape[1] > 0, "anchor_context needs the anchor's predecessor among the new context rows")
        if q_positions is None:
            pair = torch.cat([ctx[:, -1:], noise_embedding[:, :1]], dim=-1)  # [b, 1, 2H]: one block
            return self.anchor_proj(pair).expand(b, q_len, H)
        first = torch.arange(q_len, device=ctx.device) // self.config.block_size * self.config.block_size  # [q]
        row = (q_positions[:, first] - 1 - ctx_positions[:, :1]).clamp(0, ctx.shape[1] - 1)  # [b, q]: row of a - 1
        last = ctx.gather(1, row[..., None].expand(b, q_len, ctx.shape[-1]))
        return self.anchor_proj(torch.cat([last, noise_embedding[:, first]], dim=-1))

    @property
    def id_map(self) -> torch.Tensor | None:
        """Draft id -> target id for a reduced draft vocabulary, else None (ids are target ids)."""
        return self.d2t if self.config.draft_vocab_size else None

    def head_weight(self, lm_head_weight: torch.Tensor) -> torch.Tensor:
        """The draft LM head: its own (`draft_head`) or the target's rows of the draft vocabulary (gather
        once per decoder)."""
        if self.config.draft_head:
            return self.lm_head.weight
        return lm_head_weight[self.d2t] if self.config.draft_vocab_size else lm_head_weight

    def draft_logits(self, hidden: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary [..., V_draft] (map ids with `id_map`)."""
        cfg = self.config
        logits = F.linear(hidden, head_weight) * cfg.output_multiplier
        if cfg.final_logit_softcapping:
            cap = float(cfg.final_logit_softcapping)
            logits = torch.tanh(logits / cap) * cap
        return logits

    def logits(self, hidden: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
        """Draft logits over the target vocabulary [..., V] (reduced vocab: -inf off the draft ids)."""
        small = self.draft_logits(hidden, self.head_weight(lm_head_weight))
        if self.id_map is None:
            return small
        out = torch.full((*hidden.shape[:-1], lm_head_weight.shape[0]), float("-inf"),
                         dtype=small.dtype, device=small.device)
        return out.index_copy(-1, self.id_map, small)


def check_pair(cfg: DFlashConfig, target_config) -> None:
    """Refuse a drafter that does not fit the target, naming the mismatch."""
    t_hidden, t_vocab = target_config.hidden_size, target_config.vocab_size
    t_layers = target_config.num_hidden_layers
    require(cfg.hidden_size == t_hidden,
            f"drafter/target mismatch: drafter hidden_size {cfg.hidden_size} != target hidden_size {t_hidden}")
    require(cfg.vocab_size == t_vocab,
            f"drafter/target mismatch: drafter vocab_size {cfg.vocab_size} != target vocab_size {t_vocab}")
    bad = [i for i in cfg.target_layer_ids if not 0 <= i < t_layers]
    require(not bad, f"drafter/target mismatch: target_layer_ids {bad} out of range for a {t_layers}-layer target")
    require(cfg.mask_token_id is not None and 0 <= cfg.mask_token_id < t_vocab,
            f"drafter/target mismatch: mask_token_id {cfg.mask_token_id} out of range [0, {t_vocab})")
    require(cfg.block_size >= 2, f"drafter block_size {cfg.block_size} must be >= 2")


def _read_config(path: Path) -> DFlashConfig:
    cfg_file = path / "config.json"
    require(cfg_file.is_file(), f"drafter path {path} has no config.json")
    try:
        raw = json.loads(cfg_file.read_text())
        return DFlashConfig.from_dict(raw)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise GraftError(f"drafter config {cfg_file} is malformed: {type(e).__name__}: {e}") from None


SELECTOR_FILE = "selector.safetensors"  # a selector-only checkpoint's weights (`DFlashConfig.selector_of`)


def _read_state(path: Path, cfg: DFlashConfig | None = None) -> dict[str, torch.Tensor] | None:
    """The checkpoint's tensors (None: no weights); for a selector-only checkpoint (`cfg.selector_of`) the
    drafter's from that directory with the selector's unpacked over them."""
    if cfg is not None and cfg.selector_of:
        base = (path / cfg.selector_of).resolve()
        state = _read_state(base)
        require(state is not None, f"drafter {path}: its selector_of directory {base} holds no drafter weights")
        require((path / SELECTOR_FILE).is_file(), f"drafter {path}: selector_of is set but {SELECTOR_FILE} is missing")
        return {**state, **unpack_selector(load_file(path / SELECTOR_FILE), state.get("d2t"), cfg.vocab_size)}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        return None
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    return state


def load_state_strict(module: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """Load every tensor or raise one GraftError listing missing / unexpected / mis-shaped names."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(f"{k} {tuple(state[k].shape)} != {tuple(v.shape)}"
                    for k, v in expected.items() if k in state and state[k].shape != v.shape)
    problems = [f"{label}: {', '.join(items)}" for label, items in
                (("missing", missing), ("unexpected", unexpected), ("mis-shaped", shapes)) if items]
    require(not problems, f"drafter checkpoint {where} does not match the config: " + "; ".join(problems))
    module.load_state_dict(state, strict=True)


def resolve_drafter(name_or_path: str) -> Path:
    """The checkpoint directory of an embedded drafter's name (`EMBEDDED_DRAFTERS`) or of a path."""
    path = EMBEDDED_DRAFTERS.get(name_or_path) or Path(name_or_path).expanduser()
    require(path.exists(), f"drafter path {path} does not exist")
    require(path.is_dir(), f"drafter path {path} is a file; pass the checkpoint directory")
    return path


def load_drafter(name_or_path: str, target_config, device="cpu", dtype=torch.float32,
                 seed: int = 0) -> tuple[DFlashDrafter, bool]:
    """Load a drafter checkpoint directory; returns (drafter, trained).

    A directory with a config but no weights gives a randomly initialized drafter (seeded),
    `trained=False`: decoding stays exact, only acceptance suffers.
    """
    path = resolve_drafter(name_or_path)
    cfg = _read_config(path)
    check_pair(cfg, target_config)
    torch.manual_seed(seed)
    drafter = DFlashDrafter(cfg)
    init_weights(drafter)
    state = _read_state(path, cfg)
    if state is not None:
        load_state_strict(drafter, state, str(path))
    return drafter.to(device=device, dtype=dtype).eval().requires_grad_(False), state is not None


def init_weights(drafter: nn.Module, std: float = 0.02) -> None:
    """Norms at one, other weights N(0, std), the residual outputs (o_proj, down_proj) scaled by
    1 / sqrt(2 x layers), DFlash 2's convolutions the identity; for any drafter whose config has
    `num_hidden_layers` (one layer if not)."""
    layers = getattr(drafter.config, "num_hidden_layers", 1)
    for name, p in drafter.named_parameters():
        if name.endswith("norm.weight"):
            nn.init.ones_(p)
        else:
            nn.init.normal_(p, std=std / math.sqrt(1 if "o_proj" not in name and "down_proj" not in name
                                                   else 2 * layers))
    for m in drafter.modules():
        if isinstance(m, BlockConv):
            m.identity_()


def save_drafter(drafter: DFlashDrafter, path: str | Path, dtype: torch.dtype | None = None) -> None:
    """Write config.json + model.safetensors in the z-lab layout; `dtype` casts the floating-point
    weights (the released z-lab drafters are bf16; integer buffers such as `d2t` stay as they are)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(drafter.config.to_dict(), indent=2) + "\n")
    state = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().contiguous().cpu()
             for k, v in drafter.state_dict().items()}
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
