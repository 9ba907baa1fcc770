"""Tree data, verify inputs (positions, visibility, 4D mask) and the greedy walk on hand-built trees."""

import numpy as np
import pytest
import torch
from reference_tree import ancestor_levels, ancestor_matrix, children, paths, visible
from trees import is_chain, validate

from graftlib.core.kernels import verify_blob
from graftlib.core.tree import (
    EDGE_SHIFT,
    MaskBuffer,
    Tree,
    child_edges,
    greedy_walk,
    parent_mismatch,
    verify_inputs,
)

# A 5-draft-node tree (root excluded), drawn by hand:
#
#   0 (tok 10, depth 0)
#   +- 1 (tok 11, d1)
#   |  +- 3 (tok 13, d2)
#   |  |  +- 5 (tok 15, d3)
#   |  +- 4 (tok 14, d2)
#   +- 2 (tok 12, d1)
TOKENS = [10, 11, 12, 13, 14, 15]
PARENTS = [-1, 0, 0, 1, 1, 3]
DEPTHS = [0, 1, 1, 2, 2, 3]
ANCESTORS_OR_SELF = {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 1, 4}, 5: {0, 1, 3, 5}}


def branchy() -> Tree:
    return Tree(list(TOKENS), list(PARENTS), list(DEPTHS))


def test_counts_and_shape_helpers():
    t = branchy()
    validate(t)
    assert t.num_nodes == 5 and t.max_depth == 3 and not is_chain(t)
    c = Tree.chain(7, [1, 2, 3])
    validate(c)
    assert c.tokens == [7, 1, 2, 3] and c.parents == [-1, 0, 1, 2] and c.depths == [0, 1, 2, 3]
    assert is_chain(c) and c.num_nodes == 3
    r = Tree.root_only(5)
    assert r.num_nodes == 0 and is_chain(r)


def test_add_sets_depth_from_parent():
    t = Tree.root_only(10)
    assert t.add(11, 0) == 1
    assert t.add(12, 1) == 2
    assert t.add(13, 0) == 3
    assert t.depths == [0, 1, 2, 1] and t.parents == [-1, 0, 1, 0]
    validate(t)


def _children(vi) -> list[dict[int, int]]:
    return children(vi.edges, len(vi.parents))


@pytest.mark.parametrize("start", [0, 1, 7])
def test_verify_inputs_branchy(start):
    vi = verify_inputs(branchy(), start)
    n = len(TOKENS)
    assert vi.input_ids.tolist() == [TOKENS]
    assert vi.position_ids.tolist() == [[start + d for d in DEPTHS]]
    # visibility: exactly ancestor-or-self, built here from the hand-written table
    expected = torch.zeros(n, n, dtype=torch.bool)
    for i, anc in ANCESTORS_OR_SELF.items():
        for j in anc:
            expected[i, j] = True
    assert torch.equal(visible(vi.parents), expected)
    # additive mask over [prefix | tree]
    m = vi.attention_mask
    assert m is not None and m.shape == (1, 1, n, start + n) and m.dtype == torch.float32
    neg = torch.finfo(torch.float32).min
    assert (m[0, 0, :, :start] == 0).all()
    for i in range(n):
        for j in range(n):
            want = 0.0 if j in ANCESTORS_OR_SELF[i] else neg
            assert m[0, 0, i, start + j].item() == want, (i, j)
    assert _children(vi) == [{11: 1, 12: 2}, {13: 3, 14: 4}, {}, {15: 5}, {}, {}]
    assert paths(vi.parents) == [[0], [0, 1], [0, 2], [0, 1, 3], [0, 1, 4], [0, 1, 3, 5]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_verify_inputs_dtype_follows_argument(dtype):
    """The mask block is written as the dtype's bits (2 or 4 bytes an entry): 0 where visible, the
    dtype's min elsewhere, and 0 over the prefix."""
    vi = verify_inputs(branchy(), 3, dtype=dtype)
    assert vi.attention_mask.dtype == dtype
    want = torch.where(ancestor_matrix(PARENTS), 0.0, torch.finfo(dtype).min).to(dtype)
    assert torch.equal(vi.attention_mask[0, 0, :, 3:], want) and not vi.attention_mask[0, 0, :, :3].any()


def test_verify_inputs_chain_has_no_mask():
    vi = verify_inputs(Tree.chain(4, [5, 6, 7]), start=9)
    assert vi.attention_mask is None
    assert vi.position_ids.tolist() == [[9, 10, 11, 12]]
    assert torch.equal(visible(vi.parents), torch.ones(4, 4, dtype=torch.bool).tril())
    assert _children(vi) == [{5: 1}, {6: 2}, {7: 3}, {}]
    assert paths(vi.parents) == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]


def test_verify_inputs_root_only():
    vi = verify_inputs(Tree.root_only(3), start=4)
    assert vi.attention_mask is None and vi.position_ids.tolist() == [[4]]
    assert _children(vi) == [{}] and paths(vi.parents) == [[0]]


def test_tree_with_non_chain_numbering_gets_a_mask():
    # 0 -> 1 and 0 -> 2 -> 3: node 3's parent is 2, but node 2 is not node 1's child
    t = Tree([1, 2, 3, 4], [-1, 0, 0, 2], [0, 1, 1, 2])
    vi = verify_inputs(t, 2)
    assert vi.attention_mask is not None
    assert visible(vi.parents)[3].tolist() == [True, False, True, True]
    assert vi.position_ids.tolist() == [[2, 3, 3, 4]]


@pytest.mark.parametrize("tokens,parents,depths,msg", [
    ([1, 2, 3], [-1, 0, 2], [0, 1, 2], "must precede"),   # self-parent
    ([1, 2, 3], [-1, 2, 0], [0, 2, 1], "must precede"),   # parent after child
    ([1, 2, 3], [-1, 0, 1], [0, 1, 1], "depth"),          # wrong depth
    ([1, 2, 3], [-1, 0, 0], [0, 1, 1], None),             # fine
    ([1, 2, 2], [-1, 0, 0], [0, 1, 1], "duplicate"),      # duplicate sibling tokens
    ([1, 2, 2, 2], [-1, 0, 1, 0], [0, 1, 2, 1], "duplicate"),
])
def test_validate(tokens, parents, depths, msg):
    t = Tree(tokens, parents, depths)
    if msg is None:
        validate(t)
    else:
        with pytest.raises(AssertionError, match=msg):
            validate(t)


def test_validate_root_and_lengths():
    with pytest.raises(AssertionError):
        validate(Tree([1, 2], [0, 0], [0, 1]))  # root must have parent -1
    with pytest.raises(AssertionError):
        validate(Tree([1, 2], [-1, 0], [0]))  # ragged lists
    # same token under different parents is allowed
    validate(Tree([1, 2, 3, 2], [-1, 0, 0, 2], [0, 1, 1, 2]))


# Greedy walk: target_next[i] = the target's argmax after node i.
CHILDREN = verify_inputs(branchy(), 0).edges


def test_walk_full_deepest_path():
    # root -> 11 (node 1) -> 13 (node 3) -> 15 (node 5), bonus 99
    nxt = [11, 13, 0, 15, 0, 99]
    assert greedy_walk(CHILDREN, nxt) == ([0, 1, 3, 5], 99)


def test_walk_stops_at_root():
    nxt = [20, 13, 0, 15, 0, 99]  # 20 is not a child of the root
    assert greedy_walk(CHILDREN, nxt) == ([0], 20)


def test_walk_branch_switch():
    # at node 1 the target wants 14 (node 4), not 13: the walk takes the second branch
    nxt = [11, 14, 0, 15, 42, 99]
    assert greedy_walk(CHILDREN, nxt) == ([0, 1, 4], 42)
    # second root child
    nxt = [12, 13, 77, 15, 0, 99]
    assert greedy_walk(CHILDREN, nxt) == ([0, 2], 77)


def test_walk_stops_inside():
    nxt = [11, 13, 0, 16, 0, 99]  # node 3 has child 15, target wants 16
    assert greedy_walk(CHILDREN, nxt) == ([0, 1, 3], 16)


def test_walk_accepts_lazy_sequences():
    calls = []

    class Lazy:
        def __getitem__(self, i):
            calls.append(i)
            return [11, 14, 0, 15, 42, 99][i]

    assert greedy_walk(CHILDREN, Lazy()) == ([0, 1, 4], 42)
    assert calls == [0, 1, 4]  # only the visited rows are read


def test_parent_mismatch_on_a_small_tree():
    # root(0) -> a(1) -> c(3); root -> b(2) -> c'(4) with token 7 under b
    tokens, parents, depths = [9, 5, 6, 8, 7], [-1, 0, 0, 1, 2], [0, 1, 1, 2, 2]
    assert parent_mismatch(tokens, parents, depths, last=1, bonus=7)  # 7 sits under b, not a
    assert not parent_mismatch(tokens, parents, depths, last=2, bonus=7)  # 7 is b's own child
    assert not parent_mismatch(tokens, parents, depths, last=1, bonus=4)  # 4 is nowhere at depth 2
    assert not parent_mismatch(tokens, parents, depths, last=0, bonus=8)  # 8 is at depth 2, not depth 1
    assert parent_mismatch(tokens, parents, depths, last=0, bonus=6) is False  # 6 is a child of the root
    # against the definition, on every (last, bonus), including tokens carried by several nodes
    tokens, parents, depths = [9, 5, 6, 7, 7, 5], [-1, 0, 0, 1, 2, 3], [0, 1, 1, 2, 2, 3]
    for last in range(6):
        for bonus in range(11):
            d = depths[last] + 1
            want = any(depths[n] == d and tokens[n] == bonus and parents[n] != last for n in range(1, 6))
            assert parent_mismatch(tokens, parents, depths, last, bonus) is want, (last, bonus)


def test_child_edges_name_each_child_once():
    edges = child_edges(TOKENS, PARENTS)
    assert edges == {(0 << EDGE_SHIFT) | 11: 1, (0 << EDGE_SHIFT) | 12: 2, (1 << EDGE_SHIFT) | 13: 3,
                     (1 << EDGE_SHIFT) | 14: 4, (3 << EDGE_SHIFT) | 15: 5}
    assert child_edges([4], [-1]) == {}
    # the list-of-dicts view derived from them
    assert _children(verify_inputs(branchy(), 2)) == [{11: 1, 12: 2}, {13: 3, 14: 4}, {}, {15: 5}, {}, {}]


def blob_rows(pad: int = 0, itemsize: int = 4, bits: int = 7) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """verify_blob of the hand-drawn tree at start 20: (mask rows as entry values, head [2, n], keys)."""
    arrays = [np.array(x, np.int64) for x in (TOKENS, PARENTS, DEPTHS)]
    blob, keys = verify_blob(*arrays, 20, pad, bits, itemsize)
    n = len(TOKENS)
    head = blob[:16 * n].view(np.int64).reshape(2, n)
    body = blob[16 * n:].view({2: np.uint16, 4: np.uint32, 0: np.uint8}[itemsize])
    return body.reshape(n, -1).tolist() if itemsize else [], head, keys


def test_verify_blob_rows_hide_all_but_ancestors_or_self():
    rows, head, keys = blob_rows()
    visible = [[j for j, v in enumerate(row) if v == 0] for row in rows]
    assert visible == [sorted(ANCESTORS_OR_SELF[i]) for i in range(6)]
    assert all(len(row) == 6 and set(row) <= {0, 7} for row in rows)
    assert head.tolist() == [TOKENS, [20 + d for d in DEPTHS]]
    assert dict(zip(keys.tolist(), range(1, 6))) == child_edges(TOKENS, PARENTS)
    chain_rows, chain_head, _ = blob_rows(itemsize=0)  # a chain: tokens and positions only
    assert chain_rows == [] and chain_head.tolist() == head.tolist()
    root, root_keys = verify_blob(*(np.array([x], np.int64) for x in (3, -1, 0)), 5, 0, 7, 2)
    assert root[:16].view(np.int64).tolist() == [3, 5] and root[16:].tolist() == [0, 0] and root_keys.size == 0


def test_verify_blob_pad_and_widths():
    """`pad` zero columns in front of every row; a 2-byte dtype's bits fill two bytes per entry."""
    plain, _, _ = blob_rows()
    padded, _, _ = blob_rows(pad=2)
    assert padded == [[0, 0] + row for row in plain]
    half, _, _ = blob_rows(itemsize=2, bits=0xFF7F)
    assert half == [[0xFF7F if v else 0 for v in row] for row in plain]


def test_ancestor_levels_by_hand():
    levels = ancestor_levels(PARENTS, 3)
    assert levels.tolist() == [[0, 1, 2, 3, 4, 5],
                               [0, 0, 0, 1, 1, 3],
                               [0, 0, 0, 0, 0, 1],
                               [0, 0, 0, 0, 0, 0]]
    for i, anc in ANCESTORS_OR_SELF.items():
        assert set(levels[:, i].tolist()) == anc
    assert ancestor_matrix(PARENTS).tolist() == ancestor_matrix(PARENTS, 3).tolist()


def test_mask_buffer_reuse_matches_fresh_masks():
    """Rounds of trees placed at growing (and once repeated) starts in one buffer give each round's
    fresh mask exactly: the prefix columns are zero again once the tree that held them is gone."""
    other = Tree([1, 2, 3, 4], [-1, 0, 0, 2], [0, 1, 1, 2])
    buf = MaskBuffer(8, 32, "cpu", torch.float32)
    for tree, start in [(branchy(), 3), (other, 5), (branchy(), 5), (other, 9), (branchy(), 10), (other, 4)]:
        got = verify_inputs(tree, start, masks=buf).attention_mask
        want = verify_inputs(tree, start).attention_mask
        assert got.shape == want.shape and torch.equal(got, want), (start, tree.tokens)
    assert buf.fits(8, 24, "cpu", torch.float32) and not buf.fits(9, 0, "cpu", torch.float32)
    assert not buf.fits(4, 29, "cpu", torch.float32) and not buf.fits(4, 0, "cpu", torch.bfloat16)
    # too small: verify_inputs falls back to a fresh mask
    small = MaskBuffer(2, 4, "cpu", torch.float32)
    assert torch.equal(verify_inputs(branchy(), 7, masks=small).attention_mask,
                       verify_inputs(branchy(), 7).attention_mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mask_rows_written_in_place_equal_the_uploaded_block(dtype):
    """A host buffer's rows written by the kernel (`MaskBuffer.write`, the CPU path) and a block uploaded
    and copied in (`place`, the device path, forced here by hiding the host view) give the same masks,
    round after round, in both widths of mask dtype; so do the token and position rows."""
    other = Tree([1, 2, 3, 4], [-1, 0, 0, 2], [0, 1, 1, 2])
    direct, uploaded = MaskBuffer(8, 40, "cpu", dtype), MaskBuffer(8, 40, "cpu", dtype)
    uploaded.host = None
    for tree, start in [(branchy(), 3), (other, 5), (branchy(), 6), (other, 12), (branchy(), 12), (other, 30)]:
        a, b = verify_inputs(tree, start, masks=direct, dtype=dtype), verify_inputs(tree, start, masks=uploaded,
                                                                                    dtype=dtype)
        assert torch.equal(a.attention_mask, b.attention_mask), (start, tree.tokens)
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.position_ids, b.position_ids)
        hidden = a.attention_mask[0, 0, :, start:] != 0
        assert torch.equal(~hidden, visible(verify_inputs(tree, start).parents))
    assert torch.equal(direct.mask, uploaded.mask)  # the columns and rows beyond the views too


def test_mask_buffer_place_needs_the_pad():
    """A block placed after the prefix moved carries `pad(start)` zero columns; rows an earlier,
    larger tree wrote are cleared below the new start."""
    buf = MaskBuffer(6, 20, "cpu", torch.float32)
    verify_inputs(branchy(), 3, masks=buf)  # 6 rows written at columns 3..8
    assert buf.pad(5) == 2 and buf.pad(2) == 0
    with pytest.raises(ValueError, match="2 zero columns"):
        buf.place(torch.zeros(4, 4), 5)
    small = Tree([1, 2, 3, 4], [-1, 0, 0, 2], [0, 1, 1, 2])
    got = verify_inputs(small, 5, masks=buf).attention_mask
    assert torch.equal(got, verify_inputs(small, 5).attention_mask)
    assert (buf.plane[:, :5] == 0).all()  # rows 4, 5 of the earlier tree were cleared too
