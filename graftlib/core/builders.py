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
  children are ranked lazily (`Ranked`): the scorer is called once per added node (one numpy
  product), its best child found by argmax, and the full order sorted only for parents that get
  a second child.
"""

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from graftlib.core.tree import Tree


@dataclass
class Candidates:
    ids: list[list[int]]  # [D][K] token ids per depth, best first
    logq: list[list[float]]  # [D][K] draft log-probs log q_{t,d}
    top1_prob: list[float]  # [D] q_{t,d}(c^(1)), for confidence signals
    hidden: torch.Tensor | None = None  # [D, H] drafter hidden states of depths 1..D
    hidden_sq: list[float] | None = None  # [D] |h_d|^2 (read back with the top-k, for SABA's degeneration)
    hidden_dot: list[float] | None = None  # [D-1] h_d . h_{d+1}

    @property
    def depth(self) -> int:
        return len(self.ids)

    @classmethod
    def from_logits(cls, logits: torch.Tensor, k: int, hidden: torch.Tensor | None = None,
                    id_map: torch.Tensor | None = None) -> "Candidates":
        """logits [D, V] -> per-depth top-k (k clipped to V) with log q = logit - logsumexp(logits)."""
        return cls.from_top_k(top_k(logits, k, id_map, hidden), hidden)

    @classmethod
    def from_top_k(cls, packed: torch.Tensor, hidden: torch.Tensor | None = None) -> "Candidates":
        """`top_k`'s device tensor read back to the host in one transfer (one device sync); `hidden`:
        the drafter states it was packed with (their Gram entries become `hidden_sq` / `hidden_dot`)."""
        host = packed.cpu().numpy()
        d = host.shape[0]
        k = (host.shape[1] - (d if hidden is not None else 0)) // 2
        logq = host[:, k:2 * k].tolist()
        cand = cls(host[:, :k].astype(np.int64).tolist(), logq, [math.exp(q[0]) for q in logq], hidden)
        if hidden is not None:
            gram = host[:, 2 * k:].tolist()
            cand.hidden_sq = [gram[i][i] for i in range(d)]
            cand.hidden_dot = [gram[i][i + 1] for i in range(d - 1)]
        return cand


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
        drafts = [cand.ids[d][0] for d in range(n)]
        tree = Tree.chain(root_token, drafts)
        running = 0.0
        for d in range(n):
            running += cand.logq[d][0]
            tree.scores[d + 1] = running
        return tree

    def feedback(self, record: dict) -> None:
        pass


class Ranked:
    """One parent's candidate children as (token, score) by rank, best first.

    Without a scorer the pool's own order (already sorted by log q). With edge scores the order is
    found lazily: rank 0 by one argmax, the full (stable, descending) order only when a second
    child is asked for; most parents of a tree are leaves, whose children are never ranked further.
    """

    __slots__ = ("ids", "order", "scores")

    def __init__(self, ids: list[int], scores, order: Sequence[int] | None = None):
        self.ids, self.scores = ids, scores  # scores: a list with `order` given, else a numpy array
        self.order = order if order is not None else [int(scores.argmax())]

    def __len__(self) -> int:
        return len(self.ids)

    def at(self, rank: int) -> tuple[int, float]:
        if rank >= len(self.order):
            self.order = np.argsort(-self.scores, kind="stable").tolist()
        j = self.order[rank]
        return self.ids[j], float(self.scores[j])


class HeapTreeBuilder:
    """Best-first heap over prefixes (DDTree); an optional EdgeScorer makes it TDES (eq. 13)."""

    def __init__(self, scorer: EdgeScorer | None = None, name: str = "ddtree"):
        self.scorer = scorer
        self.name = name

    def _children(self, parent_token: int, d: int, cand: Candidates, pools: list[Ranked]) -> Ranked:
        """Candidate children at depth index d (0-based) in score order."""
        if self.scorer is None:
            return pools[d]
        scores = self.scorer.child_scores(parent_token, d + 1, cand.ids[d], cand.logq[d])
        return Ranked(cand.ids[d], scores if isinstance(scores, np.ndarray) else np.asarray(scores, dtype=np.float64))

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        if cand.depth == 0 or budget <= 0:
            return Tree.root_only(root_token)
        depth_limit = cand.depth
        pools = [] if self.scorer is not None else [Ranked(i, q, range(len(i))) for i, q in zip(cand.ids, cand.logq)]
        tokens, parents, depths, scores = [root_token], [-1], [0], [0.0]
        # per node: its children in score order (None at the last depth); computed when the node is added
        kids = [self._children(root_token, 0, cand, pools)]
        # heap entries: (-path score, tiebreak, parent node, rank among the parent's children, token, edge score)
        token, score = kids[0].at(0)
        heap = [(-score, 0, 0, 0, token, score)]
        counter = 1
        push, pop = heapq.heappush, heapq.heappop
        while heap and len(tokens) <= budget:
            neg, _, parent, rank, token, score = pop(heap)
            node, depth = len(tokens), depths[parent] + 1
            tokens.append(token)
            parents.append(parent)
            depths.append(depth)
            scores.append(-neg)
            ranked = kids[parent]
            if rank + 1 < len(ranked):  # next sibling: same parent, next-best child
                sib, sib_score = ranked.at(rank + 1)
                push(heap, (neg + score - sib_score, counter, parent, rank + 1, sib, sib_score))
                counter += 1
            if depth < depth_limit:  # first child of the new node
                ranked = self._children(token, depth, cand, pools)
                kid, kid_score = ranked.at(0)
                push(heap, (neg - kid_score, counter, node, 0, kid, kid_score))
                counter += 1
            else:
                ranked = None
            kids.append(ranked)
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
