"""Tree builders and budget controllers behind two small interfaces (HF CandidateGenerator-style).

`Candidates` is what one drafter forward offers: per depth d = 1..D the top-K token ids and their draft
log-probs log q_{t,d} (best first), plus the signals a budget controller may read (top-1 probabilities,
drafter hidden states); it comes back from the device in one transfer (`Candidates.from_top_k`).

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
  S_DD(u) = sum_d log q_{t,d}(u_d)); with a `BilinearScorer` (TDES) it ranks by
  S(v) = log q_{t,d}(c) + beta * f~(p, c, d) (eq. 4, 13) and visits children in that order,
  so the heap stays exact best-first under the new scores; with a `TransitionScorer` (a DFlash 2
  selector, `graftlib.methods.selector`) each parent's pool is first reweighted by the selector's
  transition score T(p, c), with or without TDES on top. Neither == DDTree. It runs compiled
  (`graftlib.core.kernels.build_heap`); its plain reference is `tests/reference_heap.py`.

Details: docs/internals.md, `graftlib.core.builders`.
"""

import math
from typing import Protocol

import numpy as np
import torch

from graftlib.core.errors import require
from graftlib.core.kernels import build_heap, heap_tables
from graftlib.core.tree import Tree


class Candidates:
    """One draft's per-depth candidate pools: [D, K] token ids and log q, best first.

    Two sources. Given as [D][K] lists or arrays (`Candidates(ids, logq, ...)`), the pools are stored
    as two C-contiguous arrays. Read back from the device (`from_top_k`), they stay one packed float32
    array [D, 2K (+ D)]: per depth the ids (as int32 bit patterns), the log q and, when packed with
    the drafter states, their Gram row; nothing is converted or copied up front. Everything is derived on
    first use (cached): the tables `id_table` / `logq_table` (numpy views, which the compiled heap and the
    batched scorers read), the list views `ids` / `logq`, and the budget controllers' signals `top1_prob` /
    `hidden_sq` / `hidden_dot`. Values are the tables' own: a float32 log q reads back as the same Python
    float through any view.
    """

    __slots__ = ("_dot", "_id_table", "_ids", "_logq", "_logq_table", "_packed", "_sq", "_top1", "hidden")

    def __init__(self, ids, logq, top1_prob: list[float] | None = None, hidden: torch.Tensor | None = None,
                 hidden_sq: list[float] | None = None, hidden_dot: list[float] | None = None,
                 packed: tuple[np.ndarray, int] | None = None):
        """`ids` / `logq`: [D][K] lists or arrays; or None with `packed` = (`top_k`'s array read back, K)."""
        self._ids = None if ids is None or isinstance(ids, np.ndarray) else ids  # lists: they are the list views
        self._logq = None if logq is None or isinstance(logq, np.ndarray) else logq
        self._id_table = None if packed is not None else _table(ids, np.int64)
        self._logq_table = None if packed is not None else _table(logq, None)
        self._top1, self.hidden, self._sq, self._dot, self._packed = top1_prob, hidden, hidden_sq, hidden_dot, packed

    @classmethod
    def from_top_k(cls, packed: torch.Tensor, hidden: torch.Tensor | None = None) -> "Candidates":
        """`top_k`'s device tensor read back to the host in one transfer (one device sync); `hidden`:
        the drafter states it was packed with (their Gram diagonals become `hidden_sq` / `hidden_dot`).
        Host work: the transfer and a numpy view of it; tables and lists are derived on first use."""
        host = packed.numpy(force=True)  # the device's copy (one call: .cpu().numpy())
        d, w = host.shape
        return cls(None, None, hidden=hidden, packed=(host, (w - (d if hidden is not None else 0)) // 2))

    @property
    def depth(self) -> int:
        return (self._packed[0] if self._packed is not None else self._id_table).shape[0]

    @property
    def width(self) -> int:
        """K: the candidates per depth."""
        return self._packed[1] if self._packed is not None else self._id_table.shape[1]

    @property
    def id_table(self) -> np.ndarray:
        """[D, K] token ids (int64 given; int32 when read back: a view of the packed array)."""
        if self._id_table is None:
            host, k = self._packed
            self._id_table = host.view(np.int32)[:, :k]
        return self._id_table

    @property
    def logq_table(self) -> np.ndarray:
        """[D, K] log q (float32 when read back: a view of the packed array)."""
        if self._logq_table is None:
            host, k = self._packed
            self._logq_table = host[:, k:2 * k]
        return self._logq_table

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
            self._top1 = [math.exp(q) for q in self.logq_table[:, 0].tolist()] if self.depth else []
        return self._top1

    @property
    def hidden_sq(self) -> list[float] | None:
        """[D] |h_d|^2 of the drafter states (the packed Gram diagonal; None without one)."""
        if self._sq is None and self._gram_packed():
            self._sq = np.diagonal(self.gram_table).tolist()
        return self._sq

    @property
    def hidden_dot(self) -> list[float] | None:
        """[D-1] h_d . h_{d+1} (the packed Gram's first superdiagonal; None without one)."""
        if self._dot is None and self._gram_packed():
            self._dot = np.diagonal(self.gram_table, 1).tolist()
        return self._dot

    @property
    def gram_table(self) -> np.ndarray | None:
        """[D, D] float32 Gram matrix of the drafter states packed with the read-back (a view), or None."""
        if not self._gram_packed():
            return None
        host, k = self._packed
        return host[:, 2 * k:]

    def _gram_packed(self) -> bool:
        return self._packed is not None and self.hidden is not None

    @classmethod
    def from_logits(cls, logits: torch.Tensor, k: int, hidden: torch.Tensor | None = None,
                    id_map: torch.Tensor | None = None) -> "Candidates":
        """logits [D, V] -> per-depth top-k (k clipped to V) with log q = logit - logsumexp(logits)."""
        return cls.from_top_k(top_k(logits, k, id_map, hidden), hidden)


def _table(rows, dtype) -> np.ndarray:
    """[D][K] rows (lists or an array) as a C-contiguous [D, K] array (D = 0: shape [0, 0])."""
    if len(rows) == 0:
        return np.zeros((0, 0), dtype=dtype or np.float64)
    return np.ascontiguousarray(rows, dtype=dtype)


def top_k(logits: torch.Tensor, k: int, id_map: torch.Tensor | None = None,
          hidden: torch.Tensor | None = None) -> torch.Tensor:
    """logits [D, V] -> per-depth top-k, packed on the logits' device for one read-back:
    [D, 2k'] float32 = token ids (their int32 bit patterns, reinterpreted: exact for any id) | log q,
    k' = min(k, V), then with `hidden` [D, H] its Gram matrix [D, D] (SABA's state reads the diagonals).

    log q = logit - logsumexp(logits): the same values as log_softmax, without materializing the
    [D, V] log-probabilities. `id_map` maps the columns of a reduced draft vocabulary to target ids.
    """
    logits = logits.float()
    top, top_ids = torch.topk(logits, min(k, logits.shape[-1]), dim=-1)
    top_logq = top - torch.logsumexp(logits, dim=-1, keepdim=True)
    if id_map is not None:
        top_ids = id_map[top_ids]
    parts = [top_ids.int().view(torch.float32), top_logq]
    if hidden is not None:
        h = hidden.float()
        parts.append(torch.mm(h, h.t()))
    return torch.cat(parts, dim=1)


class BilinearScorer(Protocol):
    """An edge scorer whose scores are bilinear in a parent side and a pool-centred child side (TDES):
    `bilinear_tables()` -> (parent [V, M], depth [D', M], child [V, M]) float32, C-contiguous, the last column
    1 in parent, 0 in depth and child, such that the score of child j of parent token p at depth d is
    X_d[j] . (parent[p] + depth[d - 1]) with X_d = [child[ids] - mean child[ids] | logq]; the compiled heap
    reads them as `kernels.HeapTables`' TDES fields, for rounds of at most D' depths."""

    def bilinear_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


class TransitionScorer(Protocol):
    """A parent-child transition score whose child side depends on the round (a DFlash 2 selector):
    `transition_tables(cand)` -> (prev [V, R], next [D, K, R]) float32, C-contiguous, the score of pool entry j
    at depth d under parent token p being prev[p] . next[d - 1, j] (`kernels.HeapTables`' selector fields)."""

    def transition_tables(self, cand: "Candidates") -> tuple[np.ndarray, np.ndarray]: ...


class TreeBuilder(Protocol):
    """Builds a round's tree from its candidates; `pool` (optional, default 0): the candidates per depth it
    reads at least, when more than the budget controller's largest budget (the decode drafts max of both)."""

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


class HeapTreeBuilder:
    """Best-first heap over prefixes (DDTree); a `BilinearScorer` makes it TDES (eq. 13). One compiled
    call per tree (`graftlib.core.kernels.build_heap`): a heap entry is a parent's next-best child not
    yet taken; popping it adds that child and pushes its next sibling and its own best child, so the
    heap pops prefixes in exact best-first order of the path score, ties broken by push order."""

    def __init__(self, scorer: BilinearScorer | None = None, name: str = "ddtree",
                 selector: TransitionScorer | None = None):
        self.scorer = scorer
        self.selector = selector
        self.name = name

    def _tables(self, cand: Candidates):
        """The heap's edge-score inputs (`kernels.HeapTables`): the scorer's TDES tables, which must cover every
        depth of `cand`, and the selector's for this round; none of either for DDTree."""
        tdes = None
        if self.scorer is not None:
            tdes = self.scorer.bilinear_tables()
            require(tdes[1].shape[0] >= cand.depth, f"the edge scorer was trained for depths 1..{tdes[1].shape[0]}, "
                    f"the draft has {cand.depth}: train it on this drafter's depths")
        return heap_tables(tdes, None if self.selector is None else self.selector.transition_tables(cand))

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        if cand.depth == 0 or budget <= 0:
            return Tree.root_only(root_token)
        tokens, parents, depths, scores, n = build_heap(root_token, cand.id_table, cand.logq_table, budget,
                                                        cand.depth, self._tables(cand))
        return Tree(tokens[:n].tolist(), parents[:n].tolist(), depths[:n].tolist(), scores[:n].tolist())

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
