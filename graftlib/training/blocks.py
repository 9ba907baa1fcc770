"""Packed drafter-training blocks: `Batch`, `pack_blocks` and `FlatBlocks` (the same without a per-row loop).

`pack_blocks` is the recipe of `graftlib.training.drafter_train` (its docstring: rows of blocks side
by side, each block seeing the context before its anchor and itself). Why `FlatBlocks`:
`pack_blocks` copies each sampled sequence's context, tokens and top-k rows in a Python loop. On a CPU the drafter's forward dwarfs that loop; on a GPU the loop (one small copy
kernel per row and tensor, plus host-side assembly and a transfer) is what the step waits for.
`FlatBlocks` concatenates every sequence once, on the training device, and builds a batch with a
handful of gathers, whatever the number of rows.

Layout (all on one device; sequence i occupies rows `start[i] .. start[i] + len[i] - 1`):
  tokens   [N] int64     the sequence's tokens (prompt + response)
  features [N, F]        row start[i] + p: the target features of position p (the last row of each
                         sequence is zero: a sequence of n tokens stores n - 1 feature rows)
  topk_ids [N, K] int64  row start[i] + p: the target's top-k ids over token p (IGNORE in the prompt)
  topk_logp[N, K] fp32   their log-probs
Invariant (tests/test_flat_blocks.py): `FlatBlocks(seqs).pack(rows, anchors)` equals
`pack_blocks([seqs[r] for r in rows], anchors, ...)` tensor for tensor.
"""

from dataclasses import dataclass

import torch

from graftlib.core.errors import require
from graftlib.training.drafter_data import Sequence

IGNORE = -100


@dataclass
class Batch:
    ids: torch.Tensor  # [R, Q] block tokens (anchor, masks), Q = blocks * block_size
    ctx: torch.Tensor  # [R, C, F] context features (zero past each row's last anchor)
    ctx_pos: torch.Tensor  # [R, C]
    q_pos: torch.Tensor  # [R, Q]
    mask: torch.Tensor  # [R, 1, Q, C + Q] bool: what each block query sees
    labels: torch.Tensor  # [R, Q] target ids, IGNORE where there is none
    depth: torch.Tensor  # [Q] k = position inside the block
    n_blocks: int
    soft_ids: torch.Tensor | None = None  # [R, Q, K] the target's top-k ids for each label, IGNORE if none
    soft_logp: torch.Tensor | None = None  # [R, Q, K] their log-probs

    def to(self, device) -> "Batch":
        moved = {k: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v)
                 for k, v in self.__dict__.items()}
        return Batch(**moved)


def pack_blocks(seqs: list[Sequence], anchors: list[list[int]], block_size: int, mask_id: int) -> Batch:
    """Rows of packed blocks: row r holds the blocks of `seqs[r]` at `anchors[r]` (`drafter_train`'s recipe)."""
    R, B, bs = len(seqs), max(len(a) for a in anchors), block_size
    Q, C = B * bs, max(max(a) for a in anchors)
    feat_dim = seqs[0].features.shape[1]
    A = torch.zeros(R, B, dtype=torch.long)
    valid = torch.zeros(R, B, dtype=torch.bool)
    ctx = torch.zeros(R, C, feat_dim, dtype=seqs[0].features.dtype, device=seqs[0].features.device)
    width = max(len(s.tokens) for s in seqs) + bs
    toks = torch.full((R, width), IGNORE, dtype=torch.long)
    soft = all(s.topk_ids is not None for s in seqs)
    if soft:  # the target's top-k by sequence position (row p: its distribution over tokens[p])
        K = seqs[0].topk_ids.shape[1]
        tk_ids = torch.full((R, width, K), IGNORE, dtype=torch.long)
        tk_logp = torch.zeros(R, width, K, dtype=torch.float32)
    for r, (s, a) in enumerate(zip(seqs, anchors)):
        A[r, :len(a)] = torch.tensor(a)
        valid[r, :len(a)] = True
        ctx[r, :max(a)] = s.features[:max(a)]
        toks[r, :len(s.tokens)] = s.tokens
        if soft:
            tk_ids[r, s.prompt_len:len(s.tokens)] = s.topk_ids.to("cpu", torch.long)
            tk_logp[r, s.prompt_len:len(s.tokens)] = s.topk_logp.to("cpu", torch.float32)
    k = torch.arange(bs)
    pos = A[:, :, None] + k  # [R, B, bs]
    labels = toks.gather(1, pos.reshape(R, Q)).view(R, B, bs)
    labels[:, :, 0] = IGNORE
    labels[~valid] = IGNORE
    ids = torch.full((R, B, bs), mask_id, dtype=torch.long)
    ids[:, :, 0] = torch.where(valid, toks.gather(1, A).clamp(min=0), mask_id)
    sees_ctx = torch.arange(C)[None, None, :] < (A * valid)[:, :, None]  # [R, B, C]
    sees_ctx = sees_ctx[:, :, None, :].expand(R, B, bs, C).reshape(R, Q, C)
    block_id = torch.arange(Q) // bs
    own = (block_id[:, None] == block_id[None, :]).expand(R, Q, Q)
    mask = torch.cat([sees_ctx, own], dim=-1)[:, None]
    soft_ids = soft_logp = None
    if soft:
        flat = pos.reshape(R, Q, 1).expand(R, Q, K)
        soft_ids = tk_ids.gather(1, flat).masked_fill((labels.view(R, Q) < 0)[..., None], IGNORE)
        soft_logp = tk_logp.gather(1, flat).masked_fill((labels.view(R, Q) < 0)[..., None], 0.0)
    return Batch(ids.view(R, Q), ctx, torch.arange(C).expand(R, C), pos.view(R, Q), mask, labels.view(R, Q),
                 k.repeat(B), int(valid.sum()), soft_ids, soft_logp)


class FlatBlocks:
    """Every sequence of a training set concatenated on `device`; `pack` builds a `Batch`."""

    def __init__(self, seqs: list[Sequence], device: torch.device | str = "cpu"):
        require(len(seqs) > 0, "no sequences to pack")
        lens = torch.tensor([len(s.tokens) for s in seqs])
        self.device = torch.device(device)
        self.lens = lens.to(self.device)
        self.start = (lens.cumsum(0) - lens).to(self.device)
        self.prompt_len = torch.tensor([s.prompt_len for s in seqs], device=self.device)
        self.tokens = torch.cat([s.tokens.to(torch.long) for s in seqs]).to(self.device)
        feat = seqs[0].features
        self.features = torch.zeros(int(lens.sum()), feat.shape[1], dtype=feat.dtype, device=self.device)
        for s, st in zip(seqs, self.start.tolist()):
            self.features[st:st + len(s.features)] = s.features.to(self.device)
        self.soft = all(s.topk_ids is not None for s in seqs)
        self.topk_ids = self.topk_logp = None
        if self.soft:
            K = seqs[0].topk_ids.shape[1]
            self.topk_ids = torch.full((len(self.tokens), K), IGNORE, dtype=torch.long, device=self.device)
            self.topk_logp = torch.zeros(len(self.tokens), K, dtype=torch.float32, device=self.device)
            for s, st in zip(seqs, self.start.tolist()):
                self.topk_ids[st + s.prompt_len:st + len(s.tokens)] = s.topk_ids.to(self.device, torch.long)
                self.topk_logp[st + s.prompt_len:st + len(s.tokens)] = s.topk_logp.to(self.device, torch.float32)

    def pack(self, rows: list[int] | torch.Tensor, anchors: list[list[int]], block_size: int, mask_id: int):
        """The `Batch` of `pack_blocks([seqs[r] for r in rows], anchors, block_size, mask_id)`."""
        dev = self.device
        rows = torch.as_tensor(rows, device=dev)
        R, B, bs = len(anchors), max(len(a) for a in anchors), block_size
        A = torch.zeros(R, B, dtype=torch.long)
        valid = torch.zeros(R, B, dtype=torch.bool)
        for r, a in enumerate(anchors):
            A[r, :len(a)] = torch.tensor(a)
            valid[r, :len(a)] = True
        A, valid = A.to(dev), valid.to(dev)
        last = A.max(1).values  # [R]: context length of each row (its last anchor)
        C, Q = int(last.max()), B * bs
        start, length = self.start[rows], self.lens[rows]
        c = torch.arange(C, device=dev)
        ctx = self.features[(start[:, None] + c).clamp(max=len(self.tokens) - 1)]  # [R, C, F]
        ctx = ctx * (c[None, :] < last[:, None])[..., None].to(ctx.dtype)
        k = torch.arange(bs, device=dev)
        pos = A[:, :, None] + k  # [R, B, bs]
        inside = (pos < length[:, None, None]) & valid[:, :, None]
        flat = (start[:, None, None] + pos).clamp(max=len(self.tokens) - 1)
        labels = torch.where(inside, self.tokens[flat], IGNORE)
        labels[:, :, 0] = IGNORE
        ids = torch.full((R, B, bs), mask_id, dtype=torch.long, device=dev)
        ids[:, :, 0] = torch.where(valid, self.tokens[flat[:, :, 0]], mask_id)
        sees_ctx = c[None, None, :] < (A * valid)[:, :, None]  # [R, B, C]
        sees_ctx = sees_ctx[:, :, None, :].expand(R, B, bs, C).reshape(R, Q, C)
        block_id = torch.arange(Q, device=dev) // bs
        own = (block_id[:, None] == block_id[None, :]).expand(R, Q, Q)
        mask = torch.cat([sees_ctx, own], dim=-1)[:, None]
        soft_ids = soft_logp = None
        if self.soft:
            soft_ids = self.topk_ids[flat].view(R, Q, -1).masked_fill((labels.view(R, Q) < 0)[..., None], IGNORE)
            soft_logp = self.topk_logp[flat].view(R, Q, -1).masked_fill((labels.view(R, Q) < 0)[..., None], 0.0)
        return Batch(ids.view(R, Q), ctx, c.expand(R, C), pos.view(R, Q), mask, labels.view(R, Q),
                     k.repeat(B), int(valid.sum()), soft_ids, soft_logp)
