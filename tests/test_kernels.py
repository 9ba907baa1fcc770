"""The compiled heap (`graftlib.core.kernels.build_heap`, behind `HeapTreeBuilder`) against the plain
reference heap (`tests/reference_heap.py`), node for node.

On tables whose products are exact in float32 (small integers, K a power of two, log q in eighths) both
compute every edge score exactly, so the trees must be identical, ties and their order included; ties
are frequent on such tables, so the tie rule (push order; among children, the lower pool index) is
exercised. On random tables the two agree up to float32 rounding of the scores."""

import numpy as np
import pytest
import torch
from reference_heap import reference_heap
from trees import validate

from graftlib.core.builders import Candidates, HeapTreeBuilder, top_k
from graftlib.core.errors import GraftError
from graftlib.core.tree import Tree
from graftlib.methods.tdes import TDESNet, TDESScorer

ROOT = 7


def integer_candidates(rng: np.random.Generator, depth: int, k: int, vocab: int) -> Candidates:
    """Pools of distinct ids with log q in eighths, sorted best first (ties likely)."""
    ids = [rng.choice(vocab, size=k, replace=False).tolist() for _ in range(depth)]
    logq = [sorted((-rng.integers(0, 12, size=k) / 8).tolist(), reverse=True) for _ in range(depth)]
    return Candidates(ids, logq)


def integer_scorer(rng: np.random.Generator, vocab: int, depths: int, m: int = 4) -> TDESScorer:
    """Integer tables with beta s / sqrt(m) = 1 (m = 4, s = 2, beta = 1): every score is a sum of small
    integers and eighths, exact in float32 whatever the summation order."""
    def table(rows: int):
        return rng.integers(-3, 4, size=(rows, m)).astype(np.float32)
    return TDESScorer(table(vocab), table(vocab), table(depths), s=2.0, beta=1.0)


def scores_of(scorer):
    """The reference heap's edge score: the scorer's numpy scores of one pool, None for DDTree's log q."""
    return None if scorer is None else scorer.child_scores


def same_tree(a: Tree, b: Tree) -> bool:
    return (a.tokens, a.parents, a.depths, a.scores) == (b.tokens, b.parents, b.depths, b.scores)


@pytest.mark.parametrize("scored", [False, True])
@pytest.mark.parametrize("budget", [1, 5, 16, 40, 200])
def test_compiled_heap_is_the_reference_on_exact_tables(scored, budget):
    rng = np.random.default_rng(budget + 1000 * scored)
    for _ in range(25):
        cand = integer_candidates(rng, depth=6, k=8, vocab=40)
        scorer = integer_scorer(rng, 40, 6) if scored else None
        fast = HeapTreeBuilder(scorer).build(ROOT, cand, budget)
        ref = reference_heap(ROOT, cand, budget, scores_of(scorer))
        validate(fast)
        assert same_tree(fast, ref), (fast, ref)
        assert fast.num_nodes == min(budget, sum(8 ** d for d in range(1, 7)))


def test_compiled_heap_takes_every_node_when_the_budget_exceeds_the_pools():
    rng = np.random.default_rng(3)
    cand = integer_candidates(rng, depth=2, k=4, vocab=40)
    for scorer in (None, integer_scorer(rng, 40, 2)):
        tree = HeapTreeBuilder(scorer).build(ROOT, cand, 100)
        assert tree.num_nodes == 4 + 16 and same_tree(tree, reference_heap(ROOT, cand, 100, scores_of(scorer)))


@pytest.mark.parametrize("seed", range(6))
def test_compiled_tdes_matches_the_batched_reference_on_random_tables(seed):
    """Real shapes (float32 tables, packed read-back pools): the same trees, or trees whose first
    difference is a near-tie in score (float32 rounding of differently summed products)."""
    torch.manual_seed(seed)
    vocab, depth, k = 300, 8, 16
    scorer = TDESScorer.from_net(TDESNet(torch.randn(vocab, 24), m=16, depths=depth), beta=0.5)
    # the net's depth embeddings start at zero: give the depth offsets values by hand
    scorer.u0[:, :-1] = np.random.default_rng(seed).normal(size=(depth, 16)).astype(np.float32) * 0.1
    logits, hidden = torch.randn(depth, vocab) * 2, torch.randn(depth, 8)
    cand = Candidates.from_top_k(top_k(logits, k, None, hidden), hidden)
    for budget in (8, 32, 64):
        fast = HeapTreeBuilder(scorer).build(ROOT, cand, budget)
        ref = reference_heap(ROOT, cand, budget, scores_of(scorer))
        validate(fast)
        assert len(fast.tokens) == len(ref.tokens)
        for i, (a, b) in enumerate(zip(zip(fast.tokens, fast.parents), zip(ref.tokens, ref.parents))):
            if a != b:  # the first divergence: two candidates whose path scores tie up to rounding
                assert abs(fast.scores[i] - ref.scores[i]) < 1e-5
                break
            assert fast.scores[i] == pytest.approx(ref.scores[i], abs=1e-5)


def test_a_scorer_trained_for_fewer_depths_is_refused():
    """A scorer shallower than the draft: the compiled heap would read past its depth table, so the
    builder refuses it with a message naming both depths (`TDESScorer.builder` refuses it earlier)."""
    rng = np.random.default_rng(0)
    cand = integer_candidates(rng, depth=5, k=4, vocab=40)
    shallow = integer_scorer(rng, 40, 2)
    with pytest.raises(GraftError, match="depths 1..2, the draft has 5"):
        HeapTreeBuilder(shallow).build(ROOT, cand, 200)
    with pytest.raises(GraftError, match="depths 1..2, the drafter drafts 5"):
        shallow.builder(5)
