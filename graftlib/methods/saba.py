"""SABA: State-Aware Budget Allocation, the paper's method (eqs. 14-17) and its controller.

State (eq. 15): s_t = [conf_t, degen_t, hist_t, 1], with conf_t the mean top-1 draft probability over depths,
degen_t the drafter hidden states' mean cosine between adjacent depths plus its end-to-end drift, and hist_t
the mean accepted length (bonus included) of the last w = 8 drafted rounds (`hist_prior` before any).
Censoring (graftlib's reading of hist_t): a round whose walk ends at a leaf is a lower bound, so hist_t adds
to it the draft's own forecast of the tokens beyond the leaf (`RoundRecord.censored`).

Gain (eq. 16): G_t(B) = 1 - exp(-B / lambda_t), lambda_t = max(phi^T s_t, lam_min), tied to accepted lengths by
E[a_t(B)] = 1 + A_t G_t(B), A_t = clip(alpha^T s_t, 0, D), A_t G_t(B) <= B; phi and alpha are fitted on
same-prefix replay (`graftlib.training.graft.saba_fit`).
Cost (eq. 17): C_t(B) = c0 + c1 B + c2 B prefix_t [+ c3 log2(1 + B)] [+ c4 prefix_t] seconds per round (c0 holds
the draft step); a 3-entry c is the paper's, c3 and c4 fit a CPU.
Utility (eq. 14): B_t = argmax_B U_t(B) over the grid, ties to the smallest budget; the default
U_t(B) = (1 + A_t G_t(B)) / C_t(B) is tokens per second (what the oracle maximizes), utility="paper" the
paper's literal G_t(B) / C_t(B).

`BudgetGrid` is the one evaluator of U_t (grid-only terms computed once, a round one pass of scalar ops).
`SabaController` is the decode loop's budget controller; graftlib's extensions (AR gates, gain and cost
tables, online gain correction) plug in from `graftlib.methods.saba_extensions`, off in the paper's setting.
Invariants: the controller returns a budget from its grid (capped at `cap`), or 0 for an AR step when a gate
declines; it reads no device tensor. Details: docs/internals.md, `graftlib.methods.saba`.
"""

import functools
import math
from collections import deque
from typing import NamedTuple

import numba
import numpy as np
import torch

from graftlib.core.builders import Candidates
from graftlib.methods.saba_extensions import ArGate, GainCorrection, GainTable, ar_utility, table_correction
from graftlib.methods.saba_params import SabaParams

# ----------------------------------------------------------------------------- state (eq. 15)


def degeneration(hidden: torch.Tensor | None) -> float:
    """degen_t of eq. 15 from drafter hidden states [D, H] (`degeneration_from` over their Gram matrix); 0 when
    D < 2 or no hidden states."""
    if hidden is None or hidden.shape[0] < 2:
        return 0.0
    h = hidden.float()
    gram = torch.mm(h, h.t()).numpy()  # [D, D]: one small matmul
    return degeneration_from(np.diagonal(gram), np.diagonal(gram, 1))


def degeneration_from(sq, dots) -> float:
    """degen_t from the squared norms |h_d|^2 [D] and the adjacent products h_d . h_{d+1} [D-1] (lists or arrays;
    `Candidates.hidden_sq` / `hidden_dot`, read back with the draft: no device sync here): `_degeneration`."""
    return _degeneration(np.asarray(sq, np.float64), np.asarray(dots, np.float64)) if len(sq) >= 2 else 0.0


@numba.njit(cache=True)
def _degeneration(sq, dots) -> float:
    """The one definition of eq. 15's degen_t: r_{t,d} = h_d . h_{d+1} / |h_d| |h_{d+1}| for d = 1..D-1, their
    mean plus the drift r_{t,D-1} - r_{t,1}, in float64 (D >= 2)."""
    total, first, last = 0.0, 0.0, 0.0
    for d in range(dots.shape[0]):
        r = np.float64(dots[d]) / max(math.sqrt(np.float64(sq[d]) * np.float64(sq[d + 1])), 1e-12)
        total += r
        if d == 0:
            first = r
        last = r
    return total / dots.shape[0] + (last - first)


@numba.njit(cache=True)
def packed_signals(logq, gram) -> tuple[float, float]:
    """(conf_t, degen_t) from the pools' log q [D, K] and the drafter states' Gram matrix [D, D] (float32
    views of the read-back): the mean top-1 probability and `_degeneration` of the Gram's diagonals."""
    D = logq.shape[0]
    if D == 0:
        return 0.0, 0.0
    conf = 0.0
    for d in range(D):
        conf += math.exp(np.float64(logq[d, 0]))
    conf /= D
    if D < 2:
        return conf, 0.0
    return conf, _degeneration(np.diag(gram).copy(), np.diag(gram[:, 1:]).copy())


@functools.cache
def warm_up() -> None:
    """Compile (or load from numba's disk cache) `packed_signals` for a read-back's strided float32 views,
    once per process, before a decode is timed."""
    packed = np.zeros((2, 6), np.float32)
    packed_signals(packed[:, 2:4], packed[:, 4:])


class StateTracker:
    """Builds s_t = [conf_t, degen_t, hist_t, 1] from a round's candidates and the past rounds, with
    censored rounds counted at their expected length (module doc, "Censoring")."""

    def __init__(self, window: int = 8, hist_prior: float = 2.0):
        self.history: deque[float] = deque(maxlen=window)
        self.hist_prior = hist_prior
        self.logq1 = np.zeros(0)  # log q_{t,d}(c^(1)) of the last draft the tracker saw, d = 1..D (a view)

    def signals(self, cand: Candidates) -> np.ndarray:
        return np.array(self.signal_list(cand))

    def signal_list(self, cand: Candidates) -> list[float]:
        """s_t as a list of floats (`signals` is its array). A read-back packed with the drafter's Gram
        matrix gives conf and degen in one compiled call (`packed_signals`)."""
        self.logq1 = cand.logq_table[:, 0] if cand.depth else np.zeros(0)  # exp'd only for a censored round
        gram = cand.gram_table
        if gram is not None:
            conf, degen = packed_signals(cand.logq_table, gram)
            return [conf, degen, self.hist(), 1.0]
        top1 = cand.top1_prob
        conf = sum(top1) / len(top1) if top1 else 0.0
        degen = degeneration(cand.hidden) if cand.hidden_sq is None else degeneration_from(cand.hidden_sq,
                                                                                           cand.hidden_dot)
        return [conf, degen, self.hist(), 1.0]

    def hist(self) -> float:
        return sum(self.history) / len(self.history) if self.history else self.hist_prior

    def beyond(self, depth: int) -> float:
        """The draft's own forecast of the tokens a walk stopped at `depth` by the tree would have gone on
        to accept: sum_{d > depth} prod_{j = depth+1..d} q_{t,j}(c^(1)), over the last draft's top-1 chain."""
        return float(np.cumprod(np.exp(self.logq1[depth:].astype(np.float64))).sum())

    def feedback(self, record: dict) -> None:
        """a*_t of the round into the window: a_t, plus `beyond` its depth when it was censored."""
        a = record["accepted"]
        self.history.append(a + self.beyond(a - 1) if record.get("censored") else a)


# ----------------------------------------------------------------------------- model (eqs. 14, 16, 17)


def saturation(params: SabaParams, s, depth: int | None = None) -> tuple[float, float]:
    """(lambda_t, A_t) for state s_t: lambda = max(phi^T s, lam_min), A = clip(alpha^T s, 0, D)."""
    lam = max(sum(w * x for w, x in zip(params.phi, s)), params.lam_min)
    a_sat = max(sum(w * x for w, x in zip(params.alpha, s)), 0.0)
    return lam, (a_sat if depth is None else min(a_sat, depth))


def gain(budgets: np.ndarray, lam: float) -> np.ndarray:
    """G_t(B) = 1 - exp(-B / lambda_t) (eq. 16)."""
    return -np.expm1(-np.asarray(budgets, dtype=float) / lam)


def cost(budgets: np.ndarray, prefix_len, c: list[float]) -> np.ndarray:
    """C_t(B) = c0 + c1 B + c2 B prefix_t (eq. 17) [+ c3 log2(1 + B)] [+ c4 prefix_t], seconds per round, for
    an array of budgets (a scalar budget gives a 0-d array)."""
    b = np.asarray(budgets, dtype=float)
    out = c[0] + b * (c[1] + c[2] * prefix_len)
    if len(c) > 3:
        out = out + c[3] * np.log2(1.0 + b)
    return out + c[4] * prefix_len if len(c) > 4 else out


def round_costs(params: SabaParams, budgets, prefix_len: int) -> np.ndarray:
    """The calibration's C_t(B) in seconds: eq. 17 (`cost`) plus the cost table's correction."""
    return cost(budgets, prefix_len, params.c) + table_correction(params.cost_table, budgets)


class Choice(NamedTuple):
    """One evaluation of U_t over the grid (`BudgetGrid.choose`)."""

    budget: int  # B_t = argmax_B U_t(B), the smallest budget on ties
    extra: float  # E[a_t(B_t)] - 1 before the online correction: the tokens the model expects the draft to add
    utility: float  # U_t(B_t)
    after_draft: float  # max_B numerator / (C_t(B) - c_draft): the best utility once the draft is paid


class BudgetGrid:
    """U_t(B) (eq. 14) over a fixed grid of budgets, in plain floats.

    Eq. 17 plus the cost table is affine in the prefix, C_t(B) = C(B, 0) + prefix dC(B), so C(B, 0)
    and dC(B) are computed once; a gain table's interpolation onto the grid is fixed too (`GainTable`)."""

    def __init__(self, params: SabaParams, grid):
        self.params, self.budgets = params, [float(b) for b in grid]
        c0 = round_costs(params, grid, 0)
        self.cost0, self.slope = c0.tolist(), (round_costs(params, grid, 1) - c0).tolist()
        self.table = None if params.gain_table is None else GainTable(params.gain_table, grid)

    def extras(self, s: list[float], depth: int | None) -> tuple[list[float], list[float] | None]:
        """(E[a_t(B)] - 1, G_t(B)) over the grid: A_t G_t(B) by eq. 16, or the gain table's (G: None); at
        most B (a B-node tree accepts at most B draft tokens)."""
        if self.table is not None:
            return [min(e, b) for e, b in zip(self.table.extras(s, depth), self.budgets)], None
        lam, a_sat = saturation(self.params, s, depth)
        gains = [-math.expm1(-b / lam) for b in self.budgets]
        return [min(a_sat * g, b) for g, b in zip(gains, self.budgets)], gains

    def choose(self, s: list[float], prefix_len: int, depth: int | None, k: float = 1.0) -> Choice:
        """B_t and its terms in one pass: numerator 1 + k (E[a_t(B)] - 1) (k: the online correction) or
        the paper's G_t(B), over C_t(B)."""
        extra, gains = self.extras(s, depth)  # a gain table needs utility "throughput" (SabaParams)
        num = [1.0 + k * e for e in extra] if self.params.utility == "throughput" else gains
        c_draft = self.params.c_draft
        best_u = best_after = -math.inf
        best_b, best_e = 0.0, 0.0
        for b, n, c0, dc, e in zip(self.budgets, num, self.cost0, self.slope, extra):
            c = c0 + prefix_len * dc
            if n / c > best_u:
                best_u, best_b, best_e = n / c, b, e
            best_after = max(best_after, n / (c - c_draft))
        return Choice(int(best_b), best_e, best_u, best_after)


class SabaController:
    """BudgetController: argmax of U_t over the grid (capped at `cap`), state from `StateTracker`, with
    the extensions the params switch on (`graftlib.methods.saba_extensions`)."""

    name = "saba"

    def __init__(self, params: SabaParams, cap: int | None = None):
        grid = sorted(b for b in params.grid if cap is None or b <= cap)
        self.params = params
        self.grid = BudgetGrid(params, grid or [cap])
        self.max_budget = int(self.grid.budgets[-1])
        warm_up()
        self.reset()

    def reset(self) -> None:
        """Per-decode state: history, last state, gate schedule and gain correction start afresh."""
        self.tracker = StateTracker(self.params.window, self.params.hist_prior)
        self.last_state: list[float] | None = None  # s_t of the last draft
        self.depth: int | None = None
        self.gate = ArGate(self.params.max_skip)
        self.correction = GainCorrection(self.params.gain_prior)
        self.predicted_extra = 0.0  # E[a_t(B_t)] - 1 of the last drafted round, uncorrected

    def speculate(self, prefix_len: int) -> bool:
        """The pre-draft AR gate (`saba_extensions`): False = run this round as one plain AR step. It judges the
        last draft's conf/degen with hist_t now."""
        scheduled = self.gate.pending()
        if scheduled is not None:
            return scheduled
        u_ar = ar_utility(self.params, prefix_len)
        if u_ar is None or self.last_state is None:
            return True
        s = [*self.last_state[:2], self.tracker.hist(), 1.0]
        return self.gate.decide(u_ar > self.grid.choose(s, prefix_len, self.depth, self.correction.k).utility)

    def budget(self, cand: Candidates, prefix_len: int) -> int:
        """B_t = argmax_B U_t(B) on this round's state, or 0 (an AR step) when the post-draft gate
        declines the drafted round."""
        s = self.tracker.signal_list(cand)
        self.last_state, self.depth = s, cand.depth
        choice = self.grid.choose(s, prefix_len, cand.depth, self.correction.k)
        u_ar = ar_utility(self.params, prefix_len)
        if u_ar is not None and self.params.post_gate and u_ar > choice.after_draft:
            return 0
        self.predicted_extra = choice.extra
        return choice.budget

    def feedback(self, record: dict) -> None:
        if record["budget"] > 0:  # hist_t and the gain correction are over drafted rounds
            self.tracker.feedback(record)
            self.correction.add(self.predicted_extra, record["accepted"])
