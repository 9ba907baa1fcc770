"""Candidates, the DFlash chain, and the DDTree best-first heap checked against brute force; the
tests' reference heap (`tests/reference_heap.py`, which the compiled heap is tested against in
tests/test_kernels.py) checked under arbitrary edge scores."""

import itertools
import math

import numpy as np
import pytest
import torch
from reference_heap import ranking, reference_heap
from trees import is_chain, validate

from graftlib.core.builders import Candidates, ChainBuilder, FixedBudget, HeapTreeBuilder
from graftlib.core.tree import Tree

ROOT = 99


def make_cand(depth: int, vocab: int, k: int, seed: int, temp: float = 1.5) -> Candidates:
    g = torch.Generator().manual_seed(seed)
    return Candidates.from_logits(torch.randn(depth, vocab, generator=g) * temp, k)


def root_paths(tree: Tree) -> set[tuple[int, ...]]:
    """Token tuples from the root (excluded) to each draft node."""
    paths = {0: ()}
    for i in range(1, len(tree.tokens)):
        paths[i] = paths[tree.parents[i]] + (tree.tokens[i],)
    return {paths[i] for i in range(1, len(tree.tokens))}


def check_structure(tree: Tree, root: int = ROOT):
    assert tree.tokens[0] == root and tree.parents[0] == -1 and tree.depths[0] == 0
    validate(tree)  # parents precede children, depths consistent, siblings distinct
    for i in range(1, len(tree.tokens)):
        assert tree.parents[i] < i


def brute_force_top(cand: Candidates, budget: int) -> set[tuple[int, ...]]:
    """All prefixes up to depth D over the per-depth top-K lists, scored by the sum of logq; best `budget`."""
    scored = []
    for d in range(1, cand.depth + 1):
        for ranks in itertools.product(range(len(cand.ids[0])), repeat=d):
            toks = tuple(cand.ids[j][r] for j, r in enumerate(ranks))
            scored.append((sum(cand.logq[j][r] for j, r in enumerate(ranks)), toks))
    scored.sort(key=lambda s: -s[0])
    return {toks for _, toks in scored[:budget]}


Path = tuple[int, ...]


def greedy_frontier(cand: Candidates, budget: int, edge) -> tuple[set[Path], list[Path]]:
    """Reference best-first selection under arbitrary edge scores: repeatedly add the best child of the
    nodes taken so far (no monotonicity assumed). edge(parent_token, depth, child, logq) -> score."""
    taken: dict[tuple[int, ...], float] = {(): 0.0}
    order = []
    while len(order) < budget:
        best = None
        for path, s in taken.items():
            d = len(path)
            if d == cand.depth:
                continue
            parent_tok = path[-1] if path else ROOT
            for c, lq in zip(cand.ids[d], cand.logq[d]):
                if path + (c,) in taken:
                    continue
                v = s + edge(parent_tok, d + 1, c, lq)
                if best is None or v > best[0]:
                    best = (v, path + (c,))
        if best is None:
            break
        taken[best[1]] = best[0]
        order.append(best[1])
    return set(order), order


# ---------------------------------------------------------------- Candidates

def test_from_logits_topk_sorted_and_logsoftmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 10, generator=g)
    c = Candidates.from_logits(logits, 3)
    ref = torch.log_softmax(logits, -1)
    assert c.depth == 4 and all(len(r) == 3 for r in c.ids)
    for d in range(4):
        order = torch.argsort(logits[d], descending=True)[:3].tolist()
        assert c.ids[d] == order
        assert c.logq[d] == pytest.approx(ref[d, order].tolist(), abs=1e-6)
        assert c.logq[d] == sorted(c.logq[d], reverse=True)
        assert c.top1_prob[d] == pytest.approx(math.exp(ref[d].max().item()), rel=1e-6)
    # probabilities over the whole vocabulary sum to 1 (log-softmax, not raw logits)
    full = Candidates.from_logits(logits, 10)
    assert sum(math.exp(x) for x in full.logq[0]) == pytest.approx(1.0, abs=1e-5)


def test_from_logits_clips_k_to_vocab():
    c = Candidates.from_logits(torch.randn(2, 5), 64)
    assert all(len(r) == 5 for r in c.ids) and sorted(c.ids[0]) == list(range(5))


def test_from_logits_upcasts_half():
    logits = torch.randn(3, 7).to(torch.bfloat16)
    c = Candidates.from_logits(logits, 2)
    ref = torch.log_softmax(logits.float(), -1)
    assert c.logq[1][0] == pytest.approx(ref[1].max().item(), abs=1e-6)


# ---------------------------------------------------------------- ChainBuilder

def test_chain_builder():
    cand = make_cand(depth=5, vocab=12, k=4, seed=1)
    t = ChainBuilder().build(ROOT, cand, 3)
    assert t.tokens == [ROOT] + [cand.ids[d][0] for d in range(3)] and is_chain(t)
    assert t.scores[1:] == pytest.approx(list(itertools.accumulate(cand.logq[d][0] for d in range(3))))
    # budget above the depth is clipped to D
    t = ChainBuilder().build(ROOT, cand, 50)
    assert t.num_nodes == 5 and is_chain(t)


# ---------------------------------------------------------------- HeapTreeBuilder (DDTree)

@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [1, 2, 5, 13, 40, 83])
def test_heap_equals_brute_force(seed, budget):
    cand = make_cand(depth=3, vocab=9, k=4, seed=seed)  # 4 + 16 + 64 = 84 prefixes
    tree = HeapTreeBuilder().build(ROOT, cand, budget)
    check_structure(tree)
    assert tree.num_nodes == budget
    assert root_paths(tree) == brute_force_top(cand, budget)
    # node scores are the path sums
    for i in range(1, len(tree.tokens)):
        path, j = [], i
        while j > 0:
            path.append(j)
            j = tree.parents[j]
        depth_of = [tree.depths[n] - 1 for n in path]
        want = sum(cand.logq[d][cand.ids[d].index(tree.tokens[n])] for d, n in zip(depth_of, path))
        assert tree.scores[i] == pytest.approx(want, abs=1e-5)


def test_heap_pops_in_score_order():
    cand = make_cand(depth=4, vocab=6, k=3, seed=7)
    tree = HeapTreeBuilder().build(ROOT, cand, 30)
    assert tree.scores[1:] == sorted(tree.scores[1:], reverse=True)


@pytest.mark.parametrize("budget", [84, 85, 1000])
def test_heap_budget_above_pool(budget):
    cand = make_cand(depth=3, vocab=9, k=4, seed=2)
    tree = HeapTreeBuilder().build(ROOT, cand, budget)
    check_structure(tree)
    assert tree.num_nodes == 84  # min(budget, #possible)
    assert len(root_paths(tree)) == 84


def test_heap_first_node_and_depth_limit():
    cand = make_cand(depth=2, vocab=5, k=5, seed=3)
    tree = HeapTreeBuilder().build(ROOT, cand, 30)
    assert tree.num_nodes == 30 and tree.max_depth == 2
    assert tree.tokens[1] == cand.ids[0][0] and tree.parents[1] == 0
    assert HeapTreeBuilder().build(ROOT, cand, 0).num_nodes == 0


def test_heap_peaked_distribution_is_chain():
    # one token per depth dominates: the best D nodes form the top-1 chain
    logits = torch.full((4, 8), -20.0)
    for d, t in enumerate([3, 1, 4, 1]):
        logits[d, t] = 10.0
    cand = Candidates.from_logits(logits, 8)
    tree = HeapTreeBuilder().build(ROOT, cand, 4)
    assert tree.tokens == [ROOT, 3, 1, 4, 1] and is_chain(tree)


class BoostEdge:
    """Edge scorer: logq, plus `big` on the edge parent_token -> child at `depth`."""

    def __init__(self, parent_token, child, depth, big=100.0):
        self.key = (parent_token, child, depth)
        self.big = big
        self.calls = 0

    def edge(self, parent_token, depth, child, lq):
        return lq + (self.big if (parent_token, child, depth) == self.key else 0.0)

    def child_scores(self, parent_token, depth, child_ids, logq):
        self.calls += 1
        return [self.edge(parent_token, depth, c, q) for c, q in zip(child_ids, logq)]


class Identity:
    def child_scores(self, parent_token, depth, child_ids, logq):
        return list(logq)


@pytest.mark.parametrize("seed", range(3))
def test_scorer_identity_is_ddtree(seed):
    cand = make_cand(depth=4, vocab=10, k=5, seed=seed)
    for budget in (1, 7, 33, 200):
        a = HeapTreeBuilder().build(ROOT, cand, budget)
        b = reference_heap(ROOT, cand, budget, Identity().child_scores)
        assert (a.tokens, a.parents, a.depths) == (b.tokens, b.parents, b.depths)
        assert a.scores == pytest.approx(b.scores)


def test_scorer_boost_root_edge():
    cand = make_cand(depth=3, vocab=9, k=4, seed=5)
    worst = cand.ids[0][-1]  # the lowest-ranked depth-1 candidate
    plain = HeapTreeBuilder().build(ROOT, cand, 3)
    assert (worst,) not in root_paths(plain)
    s = BoostEdge(ROOT, worst, 1)
    tree = reference_heap(ROOT, cand, 3, s.child_scores)
    check_structure(tree)
    assert tree.tokens[1] == worst and tree.parents[1] == 0  # popped first
    assert s.calls > 0
    want_set, _want_order = greedy_frontier(cand, 3, s.edge)
    assert root_paths(tree) == want_set


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("budget", [4, 10, 25])
def test_scorer_boost_inner_edge(seed, budget):
    cand = make_cand(depth=3, vocab=9, k=4, seed=seed)
    parent, child = cand.ids[0][0], cand.ids[1][-1]  # top depth-1 token -> worst depth-2 token
    plain = HeapTreeBuilder().build(ROOT, cand, budget)
    s = BoostEdge(parent, child, 2)
    tree = reference_heap(ROOT, cand, budget, s.child_scores)
    check_structure(tree)
    assert tree.num_nodes == budget
    paths = root_paths(tree)
    assert (parent, child) in paths  # the boosted edge is right after its parent
    assert tree.tokens[2] == child and tree.parents[2] == 1
    if budget == 4:
        assert (parent, child) not in root_paths(plain)  # the boost is what put it there
    want_set, _want_order = greedy_frontier(cand, budget, s.edge)
    assert paths == want_set
    # the reference under pure logq agrees with the plain heap too (independent check of the reference)
    assert greedy_frontier(cand, budget, lambda p, d, c, q: q)[0] == root_paths(plain)


def test_scorer_penalty_removes_edge():
    cand = make_cand(depth=2, vocab=6, k=3, seed=11)
    best = cand.ids[0][0]
    s = BoostEdge(ROOT, best, 1, big=-100.0)
    tree = reference_heap(ROOT, cand, 5, s.child_scores)
    assert (best,) not in root_paths(tree)
    assert root_paths(tree) == greedy_frontier(cand, 5, s.edge)[0]


def test_reference_ranking_is_stable():
    """The reference heap ranks a parent's children in stable descending order of their scores, read
    by rank; the tie 2.0 keeps index order."""
    assert ranking(np.array([0.5, 2.0, -1.0, 2.0, 0.25])) == ([1, 3, 0, 4, 2], [2.0, 2.0, 0.5, 0.25, -1.0])
    assert ranking([-0.3]) == ([0], [-0.3])


def test_fixed_budget():
    b = FixedBudget(17)
    assert b.budget(make_cand(2, 5, 3, 0), 100) == 17 and b.max_budget == 17


def test_packed_candidates_are_views_of_the_read_back():
    """`from_top_k` keeps the packed array: ids (int32 bit patterns), log q and the Gram diagonals read
    from its views equal the tensors they came from."""
    g = torch.Generator().manual_seed(5)
    logits, hidden = torch.randn(3, 40, generator=g) * 3, torch.randn(3, 8, generator=g)
    c = Candidates.from_logits(logits, 4, hidden)
    top = torch.topk(logits, 4)
    assert c.depth == 3 and c.width == 4 and c.ids == top.indices.tolist()
    want = torch.log_softmax(logits, -1).gather(1, top.indices)
    assert torch.allclose(torch.tensor(c.logq), want, atol=1e-6)
    assert c.top1_prob == [math.exp(q[0]) for q in c.logq]  # the same Python floats as the list view's
    assert c.hidden_sq == pytest.approx((hidden * hidden).sum(1).tolist(), rel=1e-5)
    assert c.hidden_dot == pytest.approx((hidden[:-1] * hidden[1:]).sum(1).tolist(), rel=1e-5)
    assert c.id_table.tolist() == c.ids and c.logq_table.tolist() == c.logq
    plain = Candidates(c.ids, c.logq)  # from lists: the same views, no Gram
    assert plain.id_table.tolist() == c.ids and plain.top1_prob == c.top1_prob
    assert plain.hidden_sq is None and Candidates([], []).top1_prob == []
