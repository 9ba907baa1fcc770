"""The DFlash trainer's batches: blocks packed side by side in rows (`graftlib.training.drafter.dflash_train`).

One row per sampled sequence holds up to `blocks_per_seq` blocks side by side; the row's context is
its features up to its last anchor, and the mask lets a query of block b see the context positions
`< anchor_b` and its own block only (bidirectional inside, blocks blind to each other), with per-block
positions passed to `DFlashDrafter.forward`. So one packed forward equals the separate single-block
forwards the decode loop runs (tests/test_drafter_train.py). `pack_blocks` packs from the sequences;
`FlatBlocks` gathers the same batch from flat tensors on the training device (tests/test_flat_blocks.py).
"""

from dataclasses import dataclass

import torch

from graftlib.core.errors import require
from graftlib.training.drafter.data.store import Sequence
from graftlib.training.drafter.samples import (
    IGNORE,
    anchor_rows,
    batch_to,
)


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
        return batch_to(self, device)


def pack_blocks(seqs: list[Sequence], anchors: list[list[int]], block_size: int, mask_id: int) -> Batch:
    """Rows of packed blocks: row r holds the blocks of `seqs[r]` at `anchors[r]` (see module doc)."""
    rows = anchor_rows(seqs, anchors, block_size)
    A, valid, C = rows.anchor, rows.valid, rows.ctx.shape[1]
    (R, B), bs = A.shape, block_size
    Q = B * bs
    k = torch.arange(bs)
    pos = A[:, :, None] + k  # [R, B, bs]
    labels = rows.labels(pos)
    labels[:, :, 0] = IGNORE
    labels[~valid] = IGNORE
    ids = torch.full((R, B, bs), mask_id, dtype=torch.long)
    ids[:, :, 0] = torch.where(valid, rows.toks.gather(1, A).clamp(min=0), mask_id)
    sees_ctx = torch.arange(C)[None, None, :] < (A * valid)[:, :, None]  # [R, B, C]
    sees_ctx = sees_ctx[:, :, None, :].expand(R, B, bs, C).reshape(R, Q, C)
    block_id = torch.arange(Q) // bs
    own = (block_id[:, None] == block_id[None, :]).expand(R, Q, Q)
    mask = torch.cat([sees_ctx, own], dim=-1)[:, None]
    soft_ids, soft_logp = rows.soft(pos.view(R, Q), labels.view(R, Q))
    return Batch(ids.view(R, Q), rows.ctx, torch.arange(C).expand(R, C), pos.view(R, Q), mask, labels.view(R, Q),
                 k.repeat(B), int(valid.sum()), soft_ids, soft_logp)


class FlatBlocks:
    """`pack_blocks` without a per-row loop: every sequence concatenated once on the training device,
    a batch gathered from the flat tensors (on a GPU the per-row copies, not the forward, bound the
    step). Rows `start[i] .. start[i] + len[i] - 1` hold sequence i: `tokens` [N], `features` [N, F]
    (row start + p: position p's target features; a sequence's last row is zero), `topk_ids` /
    `topk_logp` [N, K] (row start + p: the target's top-k over token p; IGNORE / 0 in the prompt).
    Invariant (tests/test_flat_blocks.py): `pack` equals `pack_blocks` tensor for tensor."""

    def __init__(self, seqs: list[Sequence], device: torch.device | str = "cpu"):
        require(len(seqs) > 0, "no sequences to pack")
        self.row = {id(s): i for i, s in enumerate(seqs)}  # a sequence object -> its index here
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

    def pack_seqs(self, seqs: list[Sequence], anchors: list[list[int]], block_size: int, mask_id: int) -> Batch:
        """`pack_blocks(seqs, anchors, block_size, mask_id)`, for sequences this store holds."""
        return self.pack([self.row[id(s)] for s in seqs], anchors, block_size, mask_id)

    def pack(self, rows: list[int] | torch.Tensor, anchors: list[list[int]], block_size: int, mask_id: int) -> Batch:
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


