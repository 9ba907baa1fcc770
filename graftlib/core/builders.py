"""Tree builders and budget controllers behind two small interfaces (HF CandidateGenerator-style).

`Candidates` is what one drafter forward offers: per depth d = 1..D the top-K token ids and
their draft log-probs log q_{t,d} (sorted, best first), plus the raw signals a budget
controller may read (top-1 probabilities, drafter hidden states).

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
  so the heap stays exact best-first under the new scores. No scorer == DDTree.
"""

import heapq
from dataclasses import dataclass
from typing import Protocol

import torch

from graftlib.core.tree import Tree


@dataclass
class Candidates:
    ids: list[list[int]]  # [D][K] token ids per depth, best first
    logq: list[list[float]]  # [D][K] draft log-probs log q_{t,d}
    top1_prob: list[float]  # [D] q_{t,d}(c^(1)), for confidence signals
    hidden: torch.Tensor | None = None  # [D, H] drafter hidden states of depths 1..D

    @property
    def depth(self) -> int:
        return len(self.ids)

    @classmethod
    def from_logits(cls, logits: torch.Tensor, k: int, hidden: torch.Tensor | None = None,
                    id_map: torch.Tensor | None = None) -> "Candidates":
        """logits [D, V] -> per-depth top-k (k clipped to V) with log q = logit - logsumexp(logits)."""
        return cls.from_top_k(*top_k(logits, k, id_map), hidden)

    @classmethod
    def from_top_k(cls, ids: torch.Tensor, logq: torch.Tensor, hidden: torch.Tensor | None = None) -> "Candidates":
        """The candidates of `top_k`'s device tensors, read back to the host."""
        return cls(ids.tolist(), logq.tolist(), logq[:, 0].exp().tolist(), hidden)


def top_k(logits: torch.Tensor, k: int, id_map: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [D, V] -> per-depth top-k ids and log q [D, k'] (k' = min(k, V)), on the logits' device.

    log q = logit - logsumexp(logits): the same values as log_softmax, without materializing the
    [D, V] log-probabilities. `id_map` maps the columns of a reduced draft vocabulary to target ids.
    """
    logits = logits.float()
    top, top_ids = torch.topk(logits, min(k, logits.shape[-1]), dim=-1)
    top_logq = top - torch.logsumexp(logits, dim=-1, keepdim=True)
    if id_map is not None:
        top_ids = id_map[top_ids]
    return top_ids, top_logq


class EdgeScorer(Protocol):
    def child_scores(self, parent_token: int, depth: int, child_ids: list[int], logq: list[float]) -> list[float]:
        """Edge scores S(v) for the candidate children at `depth` under `parent_token`."""


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


class HeapTreeBuilder:
    """Best-first heap over prefixes (DDTree); an optional EdgeScorer makes it TDES (eq. 13)."""

    def __init__(self, scorer: EdgeScorer | None = None, name: str = "ddtree"):
        self.scorer = scorer
        self.name = name

    def _children(self, parent_token: int, d: int, cand: Candidates) -> tuple[list[int], list[float]]:
        """Candidate children at depth index d (0-based), best first, with their edge scores."""
        ids, logq = cand.ids[d], cand.logq[d]
        if self.scorer is None:
            return ids, logq
        scores = self.scorer.child_scores(parent_token, d + 1, ids, logq)
        order = sorted(range(len(ids)), key=scores.__getitem__, reverse=True)
        return [ids[i] for i in order], [scores[i] for i in order]

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        tree = Tree.root_only(root_token)
        if cand.depth == 0 or budget <= 0:
            return tree
        # child lists per tree node (lazily computed; depends on the node's token under a scorer)
        kids = {0: self._children(root_token, 0, cand)}
        # heap entries: (-path score, tiebreak, parent node, rank among the parent's children)
        heap = [(-kids[0][1][0], 0, 0, 0)]
        counter = 1
        while heap and tree.num_nodes < budget:
            neg, _, parent, rank = heapq.heappop(heap)
            ids, scores = kids[parent]
            node = tree.add(ids[rank], parent, -neg)
            if rank + 1 < len(ids):  # next sibling: same parent, next-best child
                heapq.heappush(heap, (neg + scores[rank] - scores[rank + 1], counter, parent, rank + 1))
                counter += 1
            depth = tree.depths[node]
            if depth < cand.depth:  # first child of the new node
                kids[node] = self._children(ids[rank], depth, cand)
                heapq.heappush(heap, (neg - kids[node][1][0], counter, node, 0))
                counter += 1
        return tree

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
