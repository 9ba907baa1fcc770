"""CaDDTree-style cost-aware stopping: DDTree's heap that sizes its own tree.

Rule (`stop_size`): over the prefixes DDTree's heap (`HeapTreeBuilder`, eq. 3) pops best-first, keep Phi_n = sum over
the n selected nodes of exp(path log-prob) (the drafter's estimate of the expected accepted drafts). With the ratio
  R(n) = (1 + Phi_n + delta) / (C_draft + C_verify(n + 1; prefix)),
the next node is added only while it increases R; the tree stops at the first node that does not
(or at the cap). Heap pops come in non-increasing path probability and verify cost is increasing
(convex on a CPU), so R is unimodal along the pop order and the first non-increase is its peak.

`round_costs(prefix)` is the whole round's cost for n = 0..cap draft nodes (C_draft + C_verify(n + 1; prefix)),
evaluated once a round: SABA's calibrated C_t (`from_params`: eq. 17, `saba.cost`, with its cost table; c0 includes
the draft step), or any function of the prefix (the constructor's `round_costs`).

`CaDDTree` is both the `TreeBuilder` and the `BudgetController` of the method: `budget` records the
round's prefix length (the builder protocol does not carry it) and returns the cap. It is a stop rule on the
one heap, not a heap of its own: the compiled heap (`heap`: DDTree's, or GRAFT's TDES-ranked one) builds the
cap's tree, whose nodes are in pop order, and the tree is its first n nodes. Invariant: the tree equals
`heap.build(root, cand, n)` for that n.

`graft+stop` (the registry) is the rule on GRAFT's TDES-ranked heap with SABA's AR gates (`gate`: a `SabaController`
on the same calibration; its pre-draft gate may skip the draft, its post-draft gate turn the round into one AR step):
SABA's budget choice replaced by the stop on the heap's own forecast. Measured in docs/budget-policies.md.
"""

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from graftlib.core.builders import Candidates, HeapTreeBuilder
from graftlib.core.errors import require
from graftlib.core.tree import Tree
from graftlib.methods.saba import SabaController, round_costs


def interpolate(curve: dict[int, float], n: int) -> float:
    """Piecewise-linear value of a measured cost curve at size n (clamped to its range)."""
    xs = sorted(curve)
    if n <= xs[0]:
        return curve[xs[0]]
    for lo, hi in itertools.pairwise(xs):
        if n <= hi:
            return curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)
    return curve[xs[-1]] * n / xs[-1]  # beyond the range: proportional extrapolation


def stop_size(path_logq: list[float], cost: Sequence[float], delta: float = 0.0) -> int:
    """The rule (module doc): n at the first node whose addition does not raise R, over the path log-probs of the
    heap's nodes in pop order (`path_logq`; all of them where R keeps rising) and the round's cost per tree size
    (`cost[n]`, n = 0 .. len(path_logq))."""
    phi, ratio = 0.0, (1.0 + delta) / cost[0]
    for n, score in enumerate(path_logq, 1):
        nxt = (1.0 + phi + math.exp(score) + delta) / cost[n]
        if nxt <= ratio:
            return n - 1
        phi, ratio = phi + math.exp(score), nxt
    return len(path_logq)


class CaDDTree:
    """The stop rule on a heap (module doc): `heap` the builder whose pops it cuts (default DDTree's), `gate` a
    `SabaController` whose AR gates it keeps (None: every round drafts)."""

    def __init__(self, round_costs: Callable[[int], Sequence[float]], cap: int, delta: float = 0.0,
                 calibration: str = "", *, heap: HeapTreeBuilder | None = None, gate: SabaController | None = None,
                 name: str = "caddtree"):
        require(isinstance(cap, int) and cap >= 1, f"{name} cap must be a positive integer, got {cap!r}")
        self.round_costs = round_costs
        self.max_budget = cap
        self.delta = delta
        self.prefix_len = 0
        self.calibration = calibration
        self.heap = heap or HeapTreeBuilder()
        self.gate = gate
        self.name = name

    @classmethod
    def from_params(cls, params, cap: int, delta: float = 0.0, *, heap: HeapTreeBuilder | None = None,
                    gated: bool = False, name: str = "caddtree") -> "CaDDTree":
        """Cost from SABA's calibrated C_t (`graftlib.methods.saba.cost` plus the cost table's correction); with
        `gated`, the calibration's AR gates too."""
        sizes = np.arange(cap + 1)
        return cls(lambda p: round_costs(params, sizes, p).tolist(), cap, delta, params.id, heap=heap,
                   gate=SabaController(params, cap=cap) if gated else None, name=name)

    def reset(self) -> None:
        self.prefix_len = 0
        if self.gate is not None:
            self.gate.reset()

    def speculate(self, prefix_len: int) -> bool:
        return self.gate is None or self.gate.speculate(prefix_len)

    def budget(self, cand: Candidates, prefix_len: int) -> int:
        """The cap, or 0 (one AR step) where the gate's post-draft check declines the drafted round."""
        self.prefix_len = prefix_len
        if self.gate is not None and self.gate.budget(cand, prefix_len) == 0:
            return 0
        return self.max_budget

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        full = self.heap.build(root_token, cand, budget)
        return full.prefix(stop_size(full.scores[1:], self.round_costs(self.prefix_len), self.delta))

    def feedback(self, record: dict) -> None:
        if self.gate is not None:
            self.gate.feedback(record)
