"""The Qwen3-style layers of graftlib's drafters (`graftlib.models.drafter`'s DFlash, `graftlib.models.eagle3`'s
EAGLE-3): RMSNorm, rotary embeddings in the half-split convention, attention whose queries come from the block and
whose keys and values come from the new context and the block (`Attention.forward` returns the context's rotated
K/V, which the drafter caches), the gated MLP, and the decoder layer (with DFlash 2's block-local convolutions
around attention and MLP where its config names them, `graftlib.models.dflash2.BlockConv`).

Each layer reads its sizes from a drafter config (`DFlashConfig` or the EAGLE-3 config): hidden_size, heads,
head_dim, rms_norm_eps, and for attention its `layer_types` / `sliding_window` / `is_causal`. The tensors' names
are z-lab's, so a checkpoint's state dict loads into these modules as it is.
"""

import torch
import torch.nn.functional as F
from torch import nn

from graftlib.models.dflash2 import BlockConv


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin [..., n, head_dim] for integer positions [..., n] (half-split "rotate_half" convention)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [b, heads, n, hd]; cos/sin [n, hd] (shared positions) or [b, 1, n, hd] (per-row positions)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg, layer_idx: int):
        super().__init__()
        hd, h, kv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim, self.n_heads, self.n_kv = hd, h, kv
        self.q_proj = nn.Linear(cfg.hidden_size, h * hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, kv * hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, kv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        sliding = cfg.layer_types is not None and cfg.layer_types[layer_idx] == "sliding_attention"
        self.sliding_window = cfg.sliding_window if sliding else None
        self.causal = sliding if cfg.is_causal is None else cfg.is_causal

    def forward(self, h: torch.Tensor, ctx: torch.Tensor, cos, sin, past_k, past_v, block_mask=None):
        """h [b, q, H] block; ctx [b, c, H] new context features; past_k/v [b, kv, p, hd] or None.

        Returns (out [b, q, H], k_ctx, v_ctx [b, kv, c, hd]: the new context's rotated K/V).
        `block_mask` (training only) is an additive/bool mask [b or 1, 1, q, p + c + q].
        """
        b, q_len, _ = h.shape
        c = ctx.shape[1]
        q = self.q_norm(self.q_proj(h).view(b, q_len, self.n_heads, self.head_dim)).transpose(1, 2)
        kv_in = torch.cat([ctx, h], dim=1)
        k = self.k_norm(self.k_proj(kv_in).view(b, c + q_len, self.n_kv, self.head_dim)).transpose(1, 2)
        v = self.v_proj(kv_in).view(b, c + q_len, self.n_kv, self.head_dim).transpose(1, 2)
        q = apply_rope(q, cos[..., -q_len:, :], sin[..., -q_len:, :])
        k = apply_rope(k, cos, sin)
        if past_k is not None:
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        mask = block_mask
        if mask is None and (self.causal or self.sliding_window is not None):
            mask = attention_mask(q_len, k.shape[2], self.causal, self.sliding_window, h.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.n_kv != self.n_heads)
        out = self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))
        p = k.shape[2] - c - q_len
        return out, k[:, :, p:p + c], v[:, :, p:p + c]


def attention_mask(q_len: int, kv_len: int, causal: bool, window: int | None, device) -> torch.Tensor:
    """Which keys each query sees (queries are the last q_len of kv_len positions): keys at or before it when
    `causal`, within `window` positions of it (on both sides unless causal) when a window is given."""
    qpos = torch.arange(kv_len - q_len, kv_len, device=device)[:, None]
    kpos = torch.arange(kv_len, device=device)[None, :]
    visible = torch.ones(q_len, kv_len, dtype=torch.bool, device=device)
    if causal:
        visible &= kpos <= qpos
    if window is not None:
        visible &= (qpos - kpos < window) & (kpos - qpos < window)
    return visible


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)
        self.has_conv = bool(cfg.conv_kernel_size)
        if self.has_conv:
            self.attention_conv, self.mlp_conv = (BlockConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size,
                                                            cfg.block_size) for _ in range(2))

    def forward(self, h, ctx, cos, sin, past_k, past_v, block_mask=None):
        x = self.input_layernorm(h)
        if self.has_conv:
            x, delta = self.attention_conv.prepare(x)
        a, k_ctx, v_ctx = self.self_attn(x, ctx, cos, sin, past_k, past_v, block_mask)
        h = h + (self.attention_conv.finish(a, delta) if self.has_conv else a)
        x = self.post_attention_layernorm(h)
        if not self.has_conv:
            return h + self.mlp(x), k_ctx, v_ctx
        x, delta = self.mlp_conv.prepare(x)
        return h + self.mlp_conv.finish(self.mlp(x), delta), k_ctx, v_ctx
