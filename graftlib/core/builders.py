"""Tree builders and budget controllers behind two small interfaces (HF CandidateGenerator-style).

`Candidates` is what one drafter forward offers: per depth d = 1..D the top-K token ids and
their draft log-probs log q_{t,d} (sorted, best first), plus the raw signals a budget
controller may read (top-1 probabilities, drafter hidden states and their Gram entries). The
top-k runs on the device and packs everything a round's host side needs into one tensor
(`top_k`); `Candidates.from_top_k` reads it back in one transfer, so drafting costs one device sync.

`TreeBuilder.build(root_token, cand, budget) -> Tree` turns them into a tree of at most
`budget` draft nodes (root not counted). `BudgetController.speculate(prefix_len) -> bool` says
before the draft whether the round drafts at all (False: one plain AR step, budget 0), and
`BudgetController.budget(cand, prefix_len) -> int` picks a drafted round's budget (0: the round
turns into one plain AR step after all, its draft thrown away). Both get `feedback(round_record)`
after verification, so adaptive rules (SABA, CaDDTree-style stopping, learned scorers) plug in
beside the fixed ones without touching the decode loop.

Builders here:
- `ChainBuilder`: the DFlash chain (top-1 at depths 1..min(budget, D)).
- `HeapTreeBuilder`: DDTree's best-first heap over prefixes (paper eq. 3,
  S_DD(u) = sum_d log q_{t,d}(u_d)); with an `EdgeScorer` it ranks by
  S(v) = log q_{t,d}(c) + beta * f~(p, c, d) (eq. 4, 13) and visits children in that order,
  so the heap stays exact best-first under the new scores. No scorer == DDTree. A parent's
  children are ranked lazily: DDTree's pool order is shared per depth (`Pool`); a plain
  `EdgeScorer` is called once per added node (`Ranked`: best child by argmax, the full order
  sorted only for parents that get a second child); a `PoolScorer` (TDES) prepares the round in
  batched calls and hands each node its leading children as lists (`PoolRanked`).

Host cost model (what `graft host-overhead` measures): right after a forward pass every library
call (numpy, torch) costs several microseconds on a CPU, and every Python object made per pool
entry costs its allocation and its later deallocation, so the round's host side reads pools through
memoryviews and does per-node work in plain Python, with the few array operations batched per round.
"""

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import torch

from graftlib.core.tree import Tree


class Candidates:
    """One draft's per-depth candidate pools: [D, K] token ids and log q, best first.

    Stored as two C-contiguous arrays, `id_table` (int64) and `logq_table` (float32 when read back
    from `top_k`, else the given values' dtype), plus, when packed with the draft, the drafter states'
    Gram matrix `gram` [D, D]. A round's host side reads only a few entries of a pool (a heap of B
    nodes touches about 2B of the D x K), so nothing is converted up front: the builders index the
    tables through memoryviews (`rows`, Python scalars per access, no per-entry objects kept), and
    the list views `ids` / `logq` / `top1_prob` / `hidden_sq` / `hidden_dot` are derived on first
    use (cached) for the code that wants lists. Values are the tables' own: a float32 log q reads
    back as the same Python float through either view.
    """

    __slots__ = ("_dot", "_ids", "_logq", "_rows", "_sq", "_top1", "gram", "hidden", "id_table", "logq_table")

    def __init__(self, ids, logq, top1_prob: list[float] | None = None, hidden: torch.Tensor | None = None,
                 hidden_sq: list[float] | None = None, hidden_dot: list[float] | None = None,
                 gram: np.ndarray | None = None):
        self._ids = None if isinstance(ids, np.ndarray) else ids  # lists given: they are the list views
        self._logq = None if isinstance(logq, np.ndarray) else logq
        self.id_table, self.logq_table = _table(ids, np.int64), _table(logq, None)
        self._top1, self.hidden, self._sq, self._dot, self.gram = top1_prob, hidden, hidden_sq, hidden_dot, gram
        self._rows = None

    @property
    def depth(self) -> int:
        return self.id_table.shape[0]

    @property
    def ids(self) -> list[list[int]]:
        """[D][K] token ids per depth, best first (a list view of `id_table`)."""
        if self._ids is None:
            self._ids = self.id_table.tolist()
        return self._ids

    @property
    def logq(self) -> list[list[float]]:
        """[D][K] draft log-probs log q_{t,d} (a list view of `logq_table`)."""
        if self._logq is None:
            self._logq = self.logq_table.tolist()
        return self._logq

    @property
    def top1_prob(self) -> list[float]:
        """[D] q_{t,d}(c^(1)), for confidence signals."""
        if self._top1 is None:
            self._top1 = [math.exp(q) for q in self.logq_table[:, 0].tolist()]
        return self._top1

    @property
    def hidden_sq(self) -> list[float] | None:
        """[D] |h_d|^2 of the drafter states (from the read-back Gram matrix; None without one)."""
        if self._sq is None and self.gram is not None:
            self._diagonals()
        return self._sq

    @property
    def hidden_dot(self) -> list[float] | None:
        """[D-1] h_d . h_{d+1} (from the read-back Gram matrix; None without one)."""
        if self._dot is None and self.gram is not None:
            self._diagonals()
        return self._dot

    def _diagonals(self) -> None:
        gram = self.gram.tolist()  # one conversion of the [D, D] matrix, both diagonals read from it
        self._sq = [gram[i][i] for i in range(len(gram))]
        self._dot = [gram[i][i + 1] for i in range(len(gram) - 1)]

    def rows(self) -> list[tuple[memoryview, memoryview]]:
        """Per depth (ids, log q) as 1-D memoryviews over the tables: indexing one gives a Python
        int / float without converting the rest of the pool (the builders' view; cached)."""
        if self._rows is None:
            k = self.id_table.shape[1]
            ids, logq = memoryview(self.id_table.reshape(-1)), memoryview(self.logq_table.reshape(-1))
            self._rows = [(ids[i:i + k], logq[i:i + k]) for i in range(0, ids.shape[0], k)]
        return self._rows

    @classmethod
    def from_logits(cls, logits: torch.Tensor, k: int, hidden: torch.Tensor | None = None,
                    id_map: torch.Tensor | None = None) -> "Candidates":
        """logits [D, V] -> per-depth top-k (k clipped to V) with log q = logit - logsumexp(logits)."""
        return cls.from_top_k(top_k(logits, k, id_map, hidden), hidden)

    @classmethod
    def from_top_k(cls, packed: torch.Tensor, hidden: torch.Tensor | None = None) -> "Candidates":
        """`top_k`'s device tensor read back to the host in one transfer (one device sync); `hidden`:
        the drafter states it was packed with (their Gram matrix becomes `gram`: `hidden_sq` / `hidden_dot`).
        Host work: two array copies (ids to int64, log q contiguous); no per-entry Python objects."""
        host = packed.cpu().numpy()
        d = host.shape[0]
        k = (host.shape[1] - (d if hidden is not None else 0)) // 2
        return cls(host[:, :k].astype(np.int64), np.ascontiguousarray(host[:, k:2 * k]), None, hidden,
                   gram=host[:, 2 * k:] if hidden is not None else None)


def _table(rows, dtype) -> np.ndarray:
    """[D][K] rows (lists or an array) as a C-contiguous [D, K] array (D = 0: shape [0, 0])."""
    if len(rows) == 0:
        return np.zeros((0, 0), dtype=dtype or np.float64)
    return np.ascontiguousarray(rows, dtype=dtype)


def top_k(logits: torch.Tensor, k: int, id_map: torch.Tensor | None = None,
          hidden: torch.Tensor | None = None) -> torch.Tensor:
    """logits [D, V] -> per-depth top-k, packed on the logits' device for one read-back:
    [D, 2k'] = token ids (float32 carries ids < 2^24 exactly) | log q, k' = min(k, V), then with
    `hidden` [D, H] its Gram matrix [D, D] (SABA's state reads the diagonals).

    log q = logit - logsumexp(logits): the same values as log_softmax, without materializing the
    [D, V] log-probabilities. `id_map` maps the columns of a reduced draft vocabulary to target ids.
    """
    logits = logits.float()
    top, top_ids = torch.topk(logits, min(k, logits.shape[-1]), dim=-1)
    top_logq = top - torch.logsumexp(logits, dim=-1, keepdim=True)
    if id_map is not None:
        top_ids = id_map[top_ids]
    parts = [top_ids.float(), top_logq]
    if hidden is not None:
        h = hidden.float()
        parts.append(torch.mm(h, h.t()))
    return torch.cat(parts, dim=1)


class EdgeScorer(Protocol):
    def child_scores(self, parent_token: int, depth: int, child_ids: list[int], logq: list[float]) -> Sequence[float]:
        """Edge scores S(v) for the candidate children at `depth` under `parent_token` (a list, or a
        numpy array, which the heap ranks without converting it)."""


class PoolScores(Protocol):
    """A round's edge scores prepared by a `PoolScorer` (pool index j: column j of `Candidates.id_table`)."""

    # (pool indices, scores) of the first ranks (at least the best child), as lists
    def leading(self, parent_token: int, depth: int) -> tuple[list[int], list[float]]: ...

    def row(self, parent_token: int, depth: int) -> np.ndarray: ...  # every child's score, [K]

    # (pool indices by score, stable descending; scores by pool index), lists; it begins with `leading`'s
    def ranked(self, parent_token: int, depth: int) -> tuple[list[int], list[float]]: ...


class PoolScorer(EdgeScorer, Protocol):
    """An `EdgeScorer` that can also prepare a whole round at once (TDES): `pool_scores(cand, depths)`
    does the per-pool work of depths 1..`depths` in batched calls and returns `PoolScores`, whose
    rows are `child_scores(parent_token, depth, cand.ids[depth - 1], cand.logq[depth - 1])` (up to
    float rounding), ranked stably in descending order. `HeapTreeBuilder` uses it when the scorer has it."""

    def pool_scores(self, cand: "Candidates", depths: int) -> PoolScores: ...


class TreeBuilder(Protocol):
    name: str

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree: ...

    def feedback(self, record: dict) -> None: ...


class BudgetController(Protocol):
    name: str
    max_budget: int  # the largest budget it may return (sizes the per-depth candidate pools)

    def reset(self) -> None: ...  # a new decode starts: forget the previous one's history

    def speculate(self, prefix_len: int) -> bool: ...

    def budget(self, cand: Candidates, prefix_len: int) -> int: ...

    def feedback(self, record: dict) -> None: ...


class ChainBuilder:
    """DFlash: the top-1 draft at each depth, `budget` of them (at most D)."""

    name = "chain"

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        n = min(budget, cand.depth)
        tree = Tree.chain(root_token, cand.id_table[:n, 0].tolist())
        running = 0.0
        for d, q in enumerate(cand.logq_table[:n, 0].tolist(), 1):
            running += q
            tree.scores[d] = running
        return tree

    def feedback(self, record: dict) -> None:
        pass


class Pool:
    """One depth's candidates in the drafter's order (sorted by log q, best first): DDTree's ranking
    of the children of every node one depth up (one object per depth, shared by those parents)."""

    __slots__ = ("ids", "logq")

    def __init__(self, ids: Sequence[int], logq: Sequence[float]):
        self.ids, self.logq = ids, logq

    def __len__(self) -> int:
        return len(self.ids)

    def at(self, rank: int) -> tuple[int, float]:
        return self.ids[rank], self.logq[rank]


class Ranked:
    """One parent's candidate children as (token, score) by rank, best first, under edge scores.

    The order is found lazily: rank 0 by one argmax, the full (stable, descending) order only when
    a second child is asked for; most parents of a tree are leaves, whose children are never ranked
    further. `order` given: that order (e.g. `range(K)` for scores already sorted).
    """

    __slots__ = ("ids", "order", "scores")

    def __init__(self, ids: Sequence[int], scores, order: Sequence[int] | None = None):
        self.ids, self.scores = ids, scores  # scores: a list with `order` given, else a numpy array
        self.order = order if order is not None else [int(scores.argmax())]

    def __len__(self) -> int:
        return len(self.ids)

    def at(self, rank: int) -> tuple[int, float]:
        if rank >= len(self.order):
            self.order = np.argsort(-self.scores, kind="stable").tolist()
        j = self.order[rank]
        return self.ids[j], float(self.scores[j])


class PoolRanked:
    """A parent's children under `PoolScores`: the first ranks from the scorer's `leading` lists (no
    row is touched), the whole ranking (`PoolScores.ranked`) only when a later rank is asked for."""

    __slots__ = ("depth", "ids", "lead_j", "lead_s", "pool", "rest", "token")

    def __init__(self, ids: Sequence[int], pool: PoolScores, parent_token: int, depth: int):
        self.ids, self.pool, self.token, self.depth = ids, pool, parent_token, depth
        self.lead_j, self.lead_s = pool.leading(parent_token, depth)
        self.rest: tuple[list[int], list[float]] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def at(self, rank: int) -> tuple[int, float]:
        if rank < len(self.lead_j):
            return self.ids[self.lead_j[rank]], self.lead_s[rank]
        if self.rest is None:
            self.rest = self.pool.ranked(self.token, self.depth)
        order, scores = self.rest
        j = order[rank]
        return self.ids[j], scores[j]


class HeapTreeBuilder:
    """Best-first heap over prefixes (DDTree); an optional EdgeScorer makes it TDES (eq. 13).

    Each node added gets its children's ranking (`kids[node]`: the shared `Pool` of the next depth
    for DDTree, a `Ranked` of its edge scores with a scorer), and the heap holds, per node in it,
    one entry: a parent's next-best child not yet taken. Popping an entry adds that child and pushes
    its next sibling and its own best child, so the heap pops prefixes in exact best-first order of
    the path score, ties broken by push order. Pools are read through `Candidates.rows` (no
    conversion of the whole pool); a `PoolScorer` prepares the round's scoring in one batched call.
    """

    def __init__(self, scorer: EdgeScorer | None = None, name: str = "ddtree"):
        self.scorer = scorer
        self.name = name

    def _rankings(self, cand: Candidates, depths: int) -> Callable[[int, int], Pool | Ranked]:
        """children(parent_token, d): the ranking of the candidates at depth index d (0-based)."""
        rows = cand.rows()
        if self.scorer is None:
            pools = [Pool(i, q) for i, q in rows]
            return lambda parent_token, d: pools[d]
        if hasattr(self.scorer, "pool_scores"):
            pool = self.scorer.pool_scores(cand, depths)
            return lambda parent_token, d: PoolRanked(rows[d][0], pool, parent_token, d + 1)

        def ranked(parent_token: int, d: int) -> Ranked:
            scores = self.scorer.child_scores(parent_token, d + 1, cand.ids[d], cand.logq[d])
            return Ranked(rows[d][0], scores if isinstance(scores, np.ndarray) else np.asarray(scores, np.float64))
        return ranked

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        if cand.depth == 0 or budget <= 0:
            return Tree.root_only(root_token)
        depth_limit, width = cand.depth, cand.id_table.shape[1]  # every pool offers `width` children
        children = self._rankings(cand, min(depth_limit, budget))
        tokens, parents, depths, scores = [root_token], [-1], [0], [0.0]
        # per node: its children in score order (None at the last depth); computed when the node is added
        kids = [children(root_token, 0)]
        # heap entries: (-path score, tiebreak, parent node, rank among the parent's children, token, edge score)
        token, score = kids[0].at(0)
        heap = [(-score, 0, 0, 0, token, score)]
        counter, node = 1, 0
        push, pop = heapq.heappush, heapq.heappop
        add_token, add_parent, add_depth, add_score, add_kids = (
            tokens.append, parents.append, depths.append, scores.append, kids.append)
        while heap and node < budget:
            neg, _, parent, rank, token, score = pop(heap)
            node, depth = node + 1, depths[parent] + 1
            add_token(token)
            add_parent(parent)
            add_depth(depth)
            add_score(-neg)
            if rank + 1 < width:  # next sibling: same parent, next-best child
                sib, sib_score = kids[parent].at(rank + 1)
                push(heap, (neg + score - sib_score, counter, parent, rank + 1, sib, sib_score))
                counter += 1
            if depth < depth_limit and node < budget:  # first child of the new node
                ranked = children(token, depth)
                kid, kid_score = ranked.at(0)
                push(heap, (neg - kid_score, counter, node, 0, kid, kid_score))
                counter += 1
                add_kids(ranked)
            else:
                add_kids(None)
        return Tree(tokens, parents, depths, scores)

    def feedback(self, record: dict) -> None:
        pass


class FixedBudget:
    name = "fixed"

    def __init__(self, budget: int):
        self.value = self.max_budget = budget

    def reset(self) -> None:
        pass

    def speculate(self, prefix_len: int) -> bool:
        return True

    def budget(self, cand: Candidates, prefix_len: int) -> int:
        return self.value

    def feedback(self, record: dict) -> None:
        pass
