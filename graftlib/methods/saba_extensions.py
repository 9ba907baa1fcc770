"""graftlib's extensions to the paper's SABA, each behind its own switch in `SabaParams`.

The paper's controller (`graftlib.methods.saba`) picks B_t = argmax_B U_t(B) on every round. On
hardware where a round can cost more than it returns (a CPU: verify grows with B, the draft is a
large share of the round) four additions keep it from drafting at a loss; why each was added, with
its measurements, is in docs/saba.md:

- the cost table (`cost_table`): a measured, non-decreasing correction delta_B per budget added to
  eq. 17 (linear in B between its budgets, flat beyond: `table_correction`);
- the gain table (`gain_table`): E[a_t(B)] = w_B^T s_t per budget in place of eq. 16's shape,
  made non-decreasing in B (a running max), interpolated on log2 B and clipped to [1, 1 + D]
  (`GainTable`);
- the AR gates (`c_ar`, `max_skip`, `post_gate`, `c_draft`): one plain AR step has utility
  U_AR = 1 / C_AR(prefix_t) (`ar_utility`). Before the draft, a round runs as an AR step when U_AR
  beats every budget, with probe rounds at doubling intervals up to `max_skip` (`ArGate`); after
  the draft, with the round's own state, it still does when U_AR beats
  max_B (1 + k_t A_t G_t(B)) / (C_t(B) - c_draft), the draft being sunk;
- the online gain correction (`gain_prior`): the extra-token term scaled by
  k_t = (n0 + R) / (n0 + P), realized over predicted extra tokens of the decode's drafted rounds
  (`GainCorrection`).

Invariants: every piece is a pure function of the params and what the controller hands it; with
`c_ar = None`, no tables and `gain_prior = None` none of them changes a choice.
"""

import math

import numpy as np

from graftlib.methods.saba_params import SabaParams


def table_correction(cost_table: dict[str, float] | None, budgets) -> np.ndarray:
    """delta_B of a cost table at `budgets` (linear in B between its budgets, flat beyond); 0 without one."""
    b = np.asarray(budgets, dtype=float)
    if cost_table is None:
        return np.zeros_like(b)
    rows = sorted((int(k), v) for k, v in cost_table.items())
    return np.interp(b, [k for k, _ in rows], [v for _, v in rows])


def ar_utility(params: SabaParams, prefix_len: int) -> float | None:
    """U_AR = 1 / C_AR(prefix_t), one plain AR step's tokens per second; None without `c_ar`."""
    if params.c_ar is None:
        return None
    return 1.0 / (params.c_ar[0] + params.c_ar[1] * prefix_len)


class GainTable:
    """E[a_t(B)] - 1 over a fixed grid from a gain table {budget: w_B}.

    The table's budgets need not be the grid's: each grid budget reads the two table rows around it,
    interpolated on log2 B (as np.interp, flat beyond the ends), a fixed pair of rows and a weight
    per grid budget computed once, so a round is one pass of scalar ops."""

    def __init__(self, table: dict[str, list[float]], grid):
        rows = sorted((int(b), w) for b, w in table.items())
        log2b = np.log2([b for b, _ in rows])
        self.weights = [list(w) for _, w in rows]  # [table budgets][4]
        self.knots = [_knot(log2b, math.log2(b)) for b in grid]

    def extras(self, s: list[float], depth: int | None) -> list[float]:
        """E[a_t(B)] - 1 over the grid: w_B^T s_t at the table's budgets, non-decreasing in B (running
        max), interpolated to the grid, clipped to [0, D]."""
        a, top = [], -math.inf
        for w in self.weights:
            top = max(top, w[0] * s[0] + w[1] * s[1] + w[2] * s[2] + w[3] * s[3])
            a.append(top)
        cap = math.inf if depth is None else depth
        return [min(max(a[i] + t * (a[j] - a[i]) - 1.0, 0.0), cap) for i, j, t in self.knots]


def _knot(xp: np.ndarray, x: float) -> tuple[int, int, float]:
    """np.interp(x, xp, fp) as fp[i] + t (fp[j] - fp[i]) for any fp: (i, j, t), flat beyond the ends."""
    if x <= xp[0]:
        return 0, 0, 0.0
    if x >= xp[-1]:
        return len(xp) - 1, len(xp) - 1, 0.0
    j = int(np.searchsorted(xp, x, side="right"))
    i = j - 1
    return (i, i, 0.0) if x == xp[i] else (i, j, float((x - xp[i]) / (xp[j] - xp[i])))


class GainCorrection:
    """k_t = (n0 + R) / (n0 + P) of the online gain correction; n0 = None: k_t = 1."""

    def __init__(self, n0: float | None):
        self.n0, self.predicted, self.realized = n0, 0.0, 0.0

    @property
    def k(self) -> float:
        return 1.0 if self.n0 is None else (self.n0 + self.realized) / (self.n0 + self.predicted)

    def add(self, predicted_extra: float, accepted: int) -> None:
        self.predicted += predicted_extra
        self.realized += accepted - 1


class ArGate:
    """The pre-draft gate's schedule: after a round the gate declines, runs of AR steps that double
    (1, 2, 4, ... up to `max_skip`) between probe rounds that draft again; a drafted round that the
    gate lets through resets the run to 1."""

    def __init__(self, max_skip: int):
        self.max_skip = max_skip
        self.skip, self.skip_left, self.probe = 1, 0, False

    def pending(self) -> bool | None:
        """The schedule's own answer before any utility is computed: False = an AR step of the current
        run, True = a probe round (drafts), None = ask the model."""
        if self.skip_left > 0:
            self.skip_left -= 1
            return False
        if self.probe:
            self.probe = False
            return True
        return None

    def decide(self, ar_wins: bool) -> bool:
        """True = draft this round; False = start (or lengthen) a run of AR steps ending in a probe."""
        if not ar_wins:
            self.skip = 1
            return True
        self.skip_left, self.probe = self.skip - 1, True
        self.skip = min(2 * self.skip, self.max_skip)
        return False
