"""`FlatBlocks.pack` (gathers from concatenated tensors, the accelerator path) equals `pack_blocks`
(the soft log-probs where a label exists: the loss reads nothing else)."""

import dataclasses

import pytest
import torch

from graftlib.training.drafter.blocks import FlatBlocks, pack_blocks
from graftlib.training.drafter.data.store import Sequence
from graftlib.training.drafter.samples import IGNORE


def _seqs(soft: bool, n: int = 6, feat: int = 5, k: int = 3, seed: int = 0) -> list[Sequence]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        plen = int(torch.randint(1, 6, (1,), generator=g))
        length = plen + int(torch.randint(2, 20, (1,), generator=g))
        resp = length - plen
        out.append(Sequence(
            tokens=torch.randint(0, 50, (length,), generator=g), prompt_len=plen,
            features=torch.randn(length - 1, feat, generator=g).to(torch.float16), uid=f"s{i}",
            topk_ids=torch.randint(0, 50, (resp, k), generator=g, dtype=torch.int32) if soft else None,
            topk_logp=torch.randn(resp, k, generator=g).to(torch.float16) if soft else None))
    return out


@pytest.mark.parametrize("soft", [False, True])
def test_flat_pack_equals_pack_blocks(soft):
    seqs = _seqs(soft)
    g = torch.Generator().manual_seed(1)
    rows = [0, 3, 3, 5, 1, 2]
    anchors = []
    for r in rows:  # ragged rows; anchors up to the last position that has a label (len - 2)
        s = seqs[r]
        n = len(s.tokens) - 1 - s.prompt_len
        pick = torch.randperm(n, generator=g)[:int(torch.randint(1, 5, (1,), generator=g))]
        anchors.append(sorted((pick + s.prompt_len).tolist()))
    want = pack_blocks([seqs[r] for r in rows], anchors, 4, 99)
    got = FlatBlocks(seqs).pack(rows, anchors, 4, 99)
    for f in dataclasses.fields(want):
        a, b = getattr(want, f.name), getattr(got, f.name)
        if f.name == "soft_logp" and a is not None:  # read only where there is a label
            a, b = a[want.labels >= 0], b[want.labels >= 0]
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b), f.name
        else:
            assert a == b, f.name
    assert (want.labels != IGNORE).any()


def test_flat_pack_catches_a_shifted_context():
    """The comparison above can fail: a store whose features are off by one row differs."""
    seqs = _seqs(False)
    flat = FlatBlocks(seqs)
    flat.features = torch.roll(flat.features, 1, 0)
    want = pack_blocks([seqs[2]], [[seqs[2].prompt_len + 1]], 4, 99)
    assert not torch.equal(want.ctx, flat.pack([2], [[seqs[2].prompt_len + 1]], 4, 99).ctx)
