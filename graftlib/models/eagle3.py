"""EAGLE-3 drafter: graftlib's own implementation, loading public EAGLE-3 checkpoints without remote code.

Architecture (SafeAILab/EAGLE's public layout and names): `fc` fuses three target layers' hidden states
(target features only; the drafter's own fed-back state skips it); one decoder layer `midlayer` whose q/k/v
read [input_layernorm(embedding), hidden_norm(hidden)] with RoPE over the drafter's own KV cache (causal,
plus a tree mask); `norm` and `lm_head` over a reduced draft vocabulary whose `d2t` buffer maps draft ids
back as offsets. `fit(target_config)` checks the pair and fixes the three target layers.

Pairing. The drafter's input at position i is (feature of position i, embedding of token i + 1) and
its output there predicts token i + 2: the token is the one the feature's position produced.

State: the drafter's K/V live in an explicit `Eagle3Cache` passed to every call (never on the module).
Draft trees: a call may append tree nodes whose `extra_mask` row names the earlier trailing cache
positions it may see (its ancestors), so a tree grown depth by depth shares one cache
(`graftlib.core.ar_drafting`); `Eagle3Cache.crop` drops them again.

Checkpoints: `config.json` (LlamaConfig keys, `draft_vocab_size`, an "Eagle3" architecture) + safetensors,
loaded strictly; `save_eagle3` writes the same layout.

The attention's and layer's pieces are separate methods so that training's unrolled steps run the very code
of the cached decode forward.

Details: docs/internals.md, `graftlib.models.eagle3`.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR
from graftlib.models.drafter_layers import MLP, RMSNorm, apply_rope, rope_cos_sin

EMBEDDED_EAGLE3_DIR = ASSETS_DIR / "drafters" / "smollm2-135m-eagle3"  # the embedded target's (once trained)


@dataclass
class Eagle3Config:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    target_layer_ids: list[int] | None = None  # low, mid, high: HF hidden_states[i + 1] (graftlib's drafters say)

    @classmethod
    def from_dict(cls, d: dict) -> "Eagle3Config":
        archs = d.get("architectures") or []
        require(any("eagle3" in a.lower() for a in archs),
                f"drafter architecture {archs} is not an EAGLE-3 checkpoint (expected e.g. LlamaForCausalLMEagle3)")
        require(d.get("hidden_act", "silu") == "silu", f"EAGLE-3 hidden_act {d.get('hidden_act')!r} is not supported")
        scaling = d.get("rope_scaling")
        require(not scaling or scaling.get("rope_type", scaling.get("type")) == "default",
                f"EAGLE-3 rope_scaling {scaling!r} is not supported (only none)")
        missing = [k for k in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size") if k not in d]
        require(not missing, f"EAGLE-3 config.json lacks {missing}")
        heads = d["num_attention_heads"]
        return cls(
            hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"], num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            vocab_size=d["vocab_size"], draft_vocab_size=d.get("draft_vocab_size", d["vocab_size"]),
            target_hidden_size=d.get("target_hidden_size", d["hidden_size"]),
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=float((d.get("rope_parameters") or {}).get("rope_theta", d.get("rope_theta", 10000.0))),
            max_position_embeddings=d.get("max_position_embeddings", 2048),
            target_layer_ids=list(d["target_layer_ids"]) if d.get("target_layer_ids") is not None else None,
        )

    def to_dict(self) -> dict:
        """The release's config.json keys (a LlamaConfig with `draft_vocab_size`), plus `target_hidden_size`
    and, when known, `target_layer_ids` (the release's checkpoints do not name their layers)."""
        return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
                "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
                "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
                "head_dim": self.head_dim, "num_hidden_layers": 1, "vocab_size": self.vocab_size,
                "draft_vocab_size": self.draft_vocab_size, "target_hidden_size": self.target_hidden_size,
                "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta, "rope_scaling": None,
                "max_position_embeddings": self.max_position_embeddings, "tie_word_embeddings": False,
                **({"target_layer_ids": self.target_layer_ids} if self.target_layer_ids is not None else {})}


def release_layer_ids(num_target_layers: int) -> list[int]:
    """The release's low / mid / high layers as layer ids (inputs of layers 2, L // 2, L - 3)."""
    n = num_target_layers
    return [1, n // 2 - 1, n - 4]


@dataclass
class Eagle3Cache:
    """The drafter's rotated K/V [1, kv_heads, n, head_dim] for the positions it has seen."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    positions: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def crop(self, n: int) -> None:
        """Keep the first n positions (drop a round's draft nodes)."""
        if self.k is not None:
            self.k, self.v = self.k[:, :, :n], self.v[:, :, :n]
        self.positions = self.positions[:n]


class Eagle3Attention(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        hd, h, kv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim, self.n_heads, self.n_kv, self.theta = hd, h, kv, cfg.rope_theta
        self.q_proj = nn.Linear(2 * cfg.hidden_size, h * hd, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, kv * hd, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, kv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, cfg.hidden_size, bias=False)

    def rope(self, positions: torch.Tensor, dtype: torch.dtype):
        """cos/sin for positions [n] (shared by the batch) or [b, n] (per row)."""
        cos, sin = rope_cos_sin(positions, self.head_dim, self.theta, dtype)
        return (cos, sin) if positions.ndim == 1 else (cos[:, None], sin[:, None])

    def query(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotated queries [b, heads, n, hd] of x [b, n, 2H]."""
        b, n, _ = x.shape
        return apply_rope(self.q_proj(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2),
                          *self.rope(positions, x.dtype))

    def key_value(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated keys and values [b, kv_heads, n, hd] of x [b, n, 2H]."""
        b, n, _ = x.shape
        k = apply_rope(self.k_proj(x).view(b, n, self.n_kv, self.head_dim).transpose(1, 2),
                       *self.rope(positions, x.dtype))
        return k, self.v_proj(x).view(b, n, self.n_kv, self.head_dim).transpose(1, 2)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """o_proj of the attention of q over k/v under the bool `mask` (True = may attend)."""
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.n_kv != self.n_heads)
        return self.o_proj(out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1))

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Eagle3Cache,
                extra_mask: torch.Tensor | None) -> torch.Tensor:
        """x [1, n, 2H] at `positions` [n]; appends the n new K/V to `cache`; attends to the cache's
        earlier positions and, among the new ones, causally, unless `extra_mask` [n, m] (bool, True =
        may attend; m >= n) says otherwise for the last m positions, the n new ones included (draft
        trees: a node sees the committed context, its ancestors and itself)."""
        n = x.shape[1]
        q = self.query(x, positions)
        k, v = self.key_value(x, positions)
        past = cache.length
        if past:
            k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
        cache.k, cache.v = k, v
        cache.positions = cache.positions + positions.tolist()
        new = extra_mask if extra_mask is not None else torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        mask = torch.cat([torch.ones(n, past + n - new.shape[1], dtype=torch.bool, device=x.device), new], dim=1)
        return self.attend(q, k, v, mask)


class Eagle3Layer(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.self_attn = Eagle3Attention(cfg)
        self.mlp = MLP(cfg)  # the same SiLU-gated MLP (gate_proj, up_proj, down_proj) as DFlash's
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def mix(self, emb: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The attention input [..., 2H]: [input_layernorm(emb), hidden_norm(hidden)]."""
        return torch.cat([self.input_layernorm(emb), self.hidden_norm(hidden)], dim=-1)

    def finish(self, hidden: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """The residual on the hidden state, then the post-attention norm and MLP with its residual."""
        hidden = hidden + attn
        return hidden + self.mlp(self.post_attention_layernorm(hidden))

    def forward(self, emb, hidden, positions, cache, extra_mask):
        return self.finish(hidden, self.self_attn(self.mix(emb, hidden), positions, cache, extra_mask))


class Eagle3Drafter(nn.Module):
    """fc + midlayer + norm + lm_head (+ the target's embedding); see the module doc."""

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = Eagle3Layer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self.layer_ids = cfg.target_layer_ids  # fixed by `fit` when the config names none

    def fit(self, target_config) -> "Eagle3Drafter":
        """Check that this drafter fits the target (hidden size, vocabulary, layers) and fix its layers."""
        cfg, t_layers = self.config, target_config.num_hidden_layers
        require(cfg.target_hidden_size == target_config.hidden_size,
                f"EAGLE-3 drafter/target mismatch: target_hidden_size {cfg.target_hidden_size} != target hidden_size "
                f"{target_config.hidden_size}")
        require(cfg.vocab_size == target_config.vocab_size,
                f"EAGLE-3 drafter/target mismatch: vocab_size {cfg.vocab_size} != target vocab_size "
                f"{target_config.vocab_size}")
        ids = cfg.target_layer_ids if cfg.target_layer_ids is not None else release_layer_ids(t_layers)
        require(len(ids) == 3 and all(0 <= i < t_layers for i in ids),
                f"EAGLE-3 target_layer_ids {ids} must be three layers of the {t_layers}-layer target")
        self.layer_ids = list(ids)
        return self

    def context_features(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """HF hidden states of the target (index 0 = embeddings) -> [1, n, 3 x target_hidden]."""
        require(self.layer_ids is not None, "EAGLE-3 drafter has no target layers yet: call fit(target_config)")
        return torch.cat([hidden_states[i + 1] for i in self.layer_ids], dim=-1)

    def new_cache(self) -> Eagle3Cache:
        return Eagle3Cache()

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: Eagle3Cache,
                extra_mask: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids [1, n] (token i + 1 beside feature i), hidden [1, n, 3 x target_hidden] target
        features or [1, n, hidden] the drafter's own outputs; returns the output hidden [1, n, hidden]."""
        hidden = self.fuse(hidden)
        return self.midlayer(self.embed_tokens(input_ids).to(hidden.dtype), hidden, positions, cache, extra_mask)

    def fuse(self, hidden: torch.Tensor) -> torch.Tensor:
        """Target features [..., 3 x target_hidden] through `fc`; the drafter's own outputs as they are."""
        return self.fc(hidden) if hidden.shape[-1] != self.config.hidden_size else hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [..., draft_vocab] of output hidden states."""
        return self.lm_head(self.norm(hidden))

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft ids -> target ids (d2t holds offsets)."""
        return draft_ids + self.d2t[draft_ids]



def load_eagle3(path: str | Path, target_embed: torch.Tensor | None = None, device="cpu",
                dtype: torch.dtype = torch.float32) -> Eagle3Drafter:
    """An EAGLE-3 checkpoint directory (config.json + *.safetensors) loaded strictly by path; the
    embedding comes from the checkpoint or, when it has none, from `target_embed` [V, H]."""
    path = Path(path).expanduser()
    require(path.is_dir(), f"EAGLE-3 drafter path {path} is not a directory")
    require((path / "config.json").is_file(), f"EAGLE-3 drafter {path} has no config.json")
    try:
        cfg = Eagle3Config.from_dict(json.loads((path / "config.json").read_text()))
    except json.JSONDecodeError as e:
        raise GraftError(f"EAGLE-3 config {path / 'config.json'} is not JSON: {e}") from None
    files = sorted(path.glob("*.safetensors"))
    require(files, f"EAGLE-3 drafter {path} has no *.safetensors weights (only safetensors are loaded)")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    model = Eagle3Drafter(cfg)
    want = model.state_dict()
    if "embed_tokens.weight" not in state:
        require(target_embed is not None, f"EAGLE-3 drafter {path} has no embed_tokens.weight: pass the target's "
                                          "input embedding (target_embed=)")
        state["embed_tokens.weight"] = target_embed.detach()
    missing = sorted(set(want) - set(state))
    unexpected = sorted(set(state) - set(want))
    shapes = [f"{k} {tuple(state[k].shape)} != {tuple(want[k].shape)}" for k in want
              if k in state and state[k].shape != want[k].shape]
    problems = ([f"missing {missing}"] if missing else []) + ([f"unexpected {unexpected}"] if unexpected else []) \
        + ([f"mis-shaped {shapes}"] if shapes else [])
    require(not problems, f"EAGLE-3 checkpoint {path} does not fit its config: " + "; ".join(problems))
    model.load_state_dict({k: v.to(want[k].dtype) for k, v in state.items()}, strict=True)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def checkpoint_id(path: str | Path) -> str | None:
    """12 hex digits of sha256 over an EAGLE-3 directory's config.json and *.safetensors bytes (names
    sorted): the checkpoint as shipped, without loading it (None: no weights there). The figures
    manifest names the EAGLE-3 drafter a figure was drawn with by this id."""
    path = Path(path).expanduser()
    files = sorted(path.glob("*.safetensors"))
    if not files:
        return None
    h = hashlib.sha256()
    for f in [path / "config.json", *files]:
        h.update(f.name.encode())
        h.update(f.read_bytes() if f.is_file() else b"")
    return h.hexdigest()[:12]


def save_eagle3(model: Eagle3Drafter, path: str | Path, dtype: torch.dtype | None = None,
                with_embedding: bool = False) -> Path:
    """Write config.json + model.safetensors in the release's layout; `dtype` casts the floating-point
    weights (`d2t`, `t2d` keep theirs). Without `with_embedding` the target's embedding is left out
    (`load_eagle3(..., target_embed=)` supplies it), which keeps a small drafter small."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2) + "\n")
    state = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().contiguous().cpu()
             for k, v in model.state_dict().items() if with_embedding or k != "embed_tokens.weight"}
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    return path
