"""SABA: State-Aware Budget Allocation (paper eqs. 14-17), its state signals, models and controller.

State (eq. 15), from the round's `Candidates` and the acceptance history:
  conf_t  = (1/D) sum_d q_{t,d}(c^(1)_{t,d})                       mean top-1 draft probability
  degen_t = (1/(D-1)) sum_d r_{t,d} + (r_{t,D-1} - r_{t,1}),  r_{t,d} = cos(h_{t,d}, h_{t,d+1})
            (0 when D < 2 or the hidden states are missing)
  hist_t  = mean accepted length a (bonus included) over the last w = 8 drafted rounds (fewer: the
            mean of those there are; none: the prior `hist_prior`, the calibration trajectories' mean)
  s_t = [conf_t, degen_t, hist_t, 1] (a bias term, so phi^T s_t has an intercept).

Gain (eq. 16): G_t(B) = 1 - exp(-B / lambda_t), lambda_t = max(phi^T s_t, lam_min), tied to accepted
lengths by the saturation model E[a_t(B)] = 1 + A_t G_t(B), A_t = clip(alpha^T s_t, 0, D) (the bonus
token is always emitted). phi and alpha are fitted on same-prefix replay (`graftlib.training.replay`).

Cost (eq. 17): C_t(B) = c0 + c1 B + c2 B prefix_t [+ c3 log2(1 + B)] [+ c4 prefix_t] seconds per round
(c0 holds the draft step, so C_t is the whole round); a 3-entry c is the paper's.

Utility (eq. 14): B_t = argmax_B U_t(B) over the grid, ties to the smallest budget. The default
U_t(B) = (1 + A_t G_t(B)) / C_t(B) (utility="throughput", tokens per second, what the oracle
B*_t = argmax a_t(B) / l_t(B) maximizes); the paper's literal G_t(B) / C_t(B) is utility="paper".

graftlib's extensions, each with its switch (why each was added, with the measurements behind it:
docs/saba.md):
- c3 log2(1 + B) and c4 prefix_t (shared with the AR step) in eq. 17, for a CPU's concave verify cost;
- a cost table (`cost_table`): eq. 17 plus a measured, non-decreasing correction delta_B per budget;
- a gain table (`gain_table`): E[a_t(B)] = w_B^T s_t per budget (monotone in B, clipped to [1, 1 + D],
  interpolated on log2 B) in place of eq. 16's shape; with 5 weights it also reads the draft mass
  M_t(B) (`draft_mass`: the probability mass of the tree DDTree would build);
- the AR gate (`c_ar`): before the draft, one plain AR step (U_AR = 1 / C_AR(prefix_t)) when it beats
  every budget, with probe rounds at doubling intervals up to `max_skip`; the post-draft gate
  (`post_gate`) compares again on this round's own state against the remaining cost C_t(B) - c_draft;
- the online gain correction (`gain_prior`): the extra-token term scaled by k_t = (n0 + R) / (n0 + P),
  realized over predicted extra tokens of the decode's drafted rounds.
`c_ar = None`, no tables and `gain_prior = None` give the paper's SABA (fits: `graftlib.training.saba_fit`).

Invariants: the controller returns a budget from its grid (capped at `cap`); a round costs it one
pass over the grid (`GridUtility`; with a gain table numpy's `decide`), microseconds, and it reads
no device tensor (the draft's state comes back with the candidates).
"""

import functools
import hashlib
import heapq
import json
import math
import os
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numba
import numpy as np
import torch

from graftlib.core.builders import Candidates
from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR, portable
from graftlib.core.records import read_json_object

PAPER_GRID = tuple(range(32, 513, 16))
CPU_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
GPU_GRID = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)  # verify is about flat to ~100 nodes on a GPU
PARAMS_ENV = "GRAFT_SABA_PARAMS"
DEFAULT_PATH = ASSETS_DIR / "saba" / "default.json"
UTILITIES = ("throughput", "paper")


@dataclass
class SabaParams:
    """Fitted SABA parameters. The defaults are an uncalibrated CPU placeholder (see `meta`)."""

    phi: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 6.0])  # lambda_t = phi^T s_t
    alpha: list[float] = field(default_factory=lambda: [3.0, 0.0, 0.3, 0.0])  # A_t = alpha^T s_t
    c: list[float] = field(default_factory=lambda: [0.065, 1.5e-3, 2e-6])  # c0 [s], c1 [s/node], c2 [, c3, c4]
    grid: list[int] = field(default_factory=lambda: list(CPU_GRID))
    window: int = 8
    hist_prior: float = 2.0
    lam_min: float = 0.5
    utility: str = "throughput"
    c_ar: list[float] | None = None  # AR step cost a0 + a1 * prefix [s]; None: never skip drafting
    max_skip: int = 16  # longest run of AR steps between two probe rounds
    gain_prior: float | None = 8.0  # n0 of the online gain correction (pseudo extra tokens); None: off
    post_gate: bool = True  # after the draft, with this round's state, an AR step may still win (needs c_ar)
    c_draft: float = 0.0  # the draft step's share of c0 [s], sunk once the round has drafted
    gain_table: dict[str, list[float]] | None = None  # {budget: w_B}: E[a_t(B)] = w_B^T s_t; None: eq. 16
    cost_table: dict[str, float] | None = None  # {budget: delta_B [s]} added to eq. 17; None: eq. 17 alone
    # {"h": s per LM-head row, "ref": {budget: mean rows}}: what a round's greedy walk pays per head row
    # beyond the calibration's mean at its budget (`saba_fit.fit_rows_cost`); the cost profile prices it,
    # SABA's own C_t(B) does not (it chooses B before the rows are known). None: not fitted.
    rows_cost: dict | None = None
    meta: dict = field(default_factory=lambda: {"source": "builtin-uncalibrated"})

    def __post_init__(self):
        require(len(self.phi) == 4 and len(self.alpha) == 4, "SABA params: phi and alpha need 4 entries "
                "(conf, degen, hist, bias)")
        require(len(self.c) in (3, 4, 5), "SABA params: c needs 3 to 5 entries (c0, c1, c2[, c3[, c4]])")
        require(len(self.grid) > 0 and all(isinstance(b, int) and b >= 1 for b in self.grid),
                f"SABA params: the budget grid must be positive integers, got {self.grid}")
        require(self.window >= 1, f"SABA params: window must be >= 1, got {self.window}")
        require(self.utility in UTILITIES, f"SABA params: utility must be one of {UTILITIES}, got {self.utility!r}")
        require(self.lam_min > 0, f"SABA params: lam_min must be > 0, got {self.lam_min}")
        require(self.c_ar is None or len(self.c_ar) == 2, "SABA params: c_ar needs 2 entries (a0, a1) or null")
        require(self.max_skip >= 1, f"SABA params: max_skip must be >= 1, got {self.max_skip}")
        require(self.gain_prior is None or self.gain_prior > 0,
                f"SABA params: gain_prior must be > 0 or null, got {self.gain_prior}")
        require(0 <= self.c_draft <= self.c[0], f"SABA params: c_draft must be in [0, c0 = {self.c[0]}], "
                f"got {self.c_draft}")
        if self.gain_table is not None:
            self.gain_table = {str(int(b)): [float(x) for x in w] for b, w in self.gain_table.items()}
            widths = {len(w) for w in self.gain_table.values()}
            require(len(self.gain_table) > 0 and widths in ({4}, {5}) and all(int(b) >= 1 for b in self.gain_table),
                    "SABA params: gain_table maps budgets >= 1 to 4 weights (conf, degen, hist, bias), "
                    "or 5 with the draft mass M_t(B)")
            require(self.utility == "throughput", "SABA params: a gain_table needs utility 'throughput'")
            rows = sorted((int(b), w) for b, w in self.gain_table.items())  # derived once, read every round
            self._table_b = np.array([b for b, _ in rows])
            self._table_log2b = np.log2(self._table_b)
            self._table_w = np.array([w for _, w in rows])  # [n_budgets, 4 or 5]
        if self.cost_table is not None:
            require(len(self.cost_table) > 0 and all(int(b) >= 1 for b in self.cost_table)
                    and all(math.isfinite(float(d)) for d in self.cost_table.values()),
                    "SABA params: cost_table maps budgets >= 1 to finite corrections in seconds")
            self.cost_table = {str(int(b)): float(d) for b, d in self.cost_table.items()}
            rows = sorted((int(b), d) for b, d in self.cost_table.items())
            self._cost_b = np.array([b for b, _ in rows], dtype=float)
            self._cost_d = np.array([d for _, d in rows])

        if self.rows_cost is not None:
            self.rows_cost = checked_rows_cost(self.rows_cost, "SABA params")

    @property
    def uses_mass(self) -> bool:
        """The gain table reads the draft mass M_t(B) (`draft_mass`) at its budgets."""
        return self.gain_table is not None and self._table_w.shape[1] == 5

    @property
    def mass_budgets(self) -> list[int]:
        """The budgets at which the gain table reads M_t(B) (empty without a mass term)."""
        return self._table_b.tolist() if self.uses_mass else []

    @property
    def id(self) -> str:
        """Content hash of the numbers (not the metadata): what a result records as its calibration."""
        d = asdict(self)
        d.pop("meta")
        for late in ("cost_table", "rows_cost"):  # fields added later: calibrations without them keep their id
            if d[late] is None:
                d.pop(late)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> dict:
        return {"id": self.id, **{k: self.meta.get(k) for k in ("source", "path", "target", "drafter", "hardware",
                                                                 "date")}}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**asdict(self), "id": self.id}, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "SabaParams":
        path = Path(path)
        d = read_json_object(path, "SABA params", "run `graft calibrate`")
        d.pop("id", None)
        unknown = set(d) - set(cls.__dataclass_fields__)
        require(not unknown, f"SABA params file {path}: unknown keys {sorted(unknown)}")
        params = cls(**d)
        params.meta = {**params.meta, "path": portable(path)}
        return params


def checked_rows_cost(rows_cost, what: str) -> dict:
    """`rows_cost` ({"h": s >= 0, "ref": {budget >= 1: mean rows >= 1}}) normalized, or `GraftError` naming `what`."""
    msg = (f"{what}: rows_cost needs h (seconds per LM-head row, >= 0) and ref (budgets >= 1 -> mean rows >= 1), "
           f"got {rows_cost!r}")
    try:
        require(isinstance(rows_cost, dict) and set(rows_cost) == {"h", "ref"}, msg)
        h = float(rows_cost["h"])
        ref = {int(b): float(r) for b, r in dict(rows_cost["ref"]).items()}
    except (TypeError, ValueError):
        raise GraftError(msg) from None
    require(math.isfinite(h) and h >= 0 and len(ref) > 0
            and all(b >= 1 and math.isfinite(r) and r >= 1 for b, r in ref.items()), msg)
    return {"h": h, "ref": {str(b): ref[b] for b in sorted(ref)}}


def default_params() -> "SabaParams":
    """$GRAFT_SABA_PARAMS, else graftlib/assets/saba/default.json, else the builtin placeholder."""
    env = os.environ.get(PARAMS_ENV)
    if env:
        return SabaParams.load(env)
    if DEFAULT_PATH.is_file():
        return SabaParams.load(DEFAULT_PATH)
    return SabaParams()


# ----------------------------------------------------------------------------- state (eq. 15)


def degeneration(hidden: torch.Tensor | None) -> float:
    """degen_t of eq. 15 from drafter hidden states [D, H]; 0 when D < 2 or no hidden states."""
    if hidden is None or hidden.shape[0] < 2:
        return 0.0
    h = hidden.float()
    gram = torch.mm(h, h.t()).tolist()  # [D, D]: one small matmul, then scalar math
    return degeneration_from([gram[d][d] for d in range(len(gram))], [gram[d][d + 1] for d in range(len(gram) - 1)])


def degeneration_from(sq: list[float], dots: list[float]) -> float:
    """degen_t from the squared norms |h_d|^2 [D] and the adjacent products h_d . h_{d+1} [D-1]
    (`Candidates.hidden_sq` / `hidden_dot`, read back with the draft: no device sync here)."""
    if len(sq) < 2:
        return 0.0
    r = [dot / max(math.sqrt(sq[d] * sq[d + 1]), 1e-12) for d, dot in enumerate(dots)]  # r_{t,d}, d = 1..D-1
    return sum(r) / len(r) + (r[-1] - r[0])


@numba.njit(cache=True)
def packed_signals(logq, gram) -> tuple[float, float]:
    """(conf_t, degen_t) from the pools' log q [D, K] and the drafter states' Gram matrix [D, D] (float32
    views of the read-back): the mean top-1 probability and eq. 15's degeneration, in float64 with
    `degeneration_from`'s operations in its order (the same values)."""
    D = logq.shape[0]
    if D == 0:
        return 0.0, 0.0
    conf = 0.0
    for d in range(D):
        conf += math.exp(np.float64(logq[d, 0]))
    conf /= D
    if D < 2:
        return conf, 0.0
    total, first, last = 0.0, 0.0, 0.0
    for d in range(D - 1):
        norm = math.sqrt(np.float64(gram[d, d]) * np.float64(gram[d + 1, d + 1]))
        r = np.float64(gram[d, d + 1]) / max(norm, 1e-12)
        total += r
        if d == 0:
            first = r
        last = r
    return conf, total / (D - 1) + (last - first)


@functools.cache
def warm_up() -> None:
    """Compile (or load from numba's disk cache) `packed_signals` for a read-back's strided float32 views,
    once per process, before a decode is timed."""
    packed = np.zeros((2, 6), np.float32)
    packed_signals(packed[:, 2:4], packed[:, 4:])


def draft_mass(cand: Candidates, budgets) -> np.ndarray:
    """M_t(B) at each budget: the summed draft probability prod_d q_{t,d}(u_d) of the B best draft
    prefixes u (DDTree's best-first tree under eq. 3's scores, ties by depth then rank).

    Under the drafter's own per-depth distributions this is the number of draft tokens a B-node
    tree is expected to accept, so it is the round's own forecast of a_t(B) - 1; the gain table calibrates
    it (a 5th weight per budget) to what the target accepts. Non-decreasing in B; flat once the
    candidates run out. One heap pass up to max(budgets) pops (about 2 us a pop)."""
    budgets = np.asarray(budgets, dtype=int)
    n, logq = int(budgets.max()), cand.logq
    if cand.depth == 0 or n < 1:
        return np.zeros(len(budgets))
    heap = [(-logq[0][0], 0, 0, 0.0)]  # (-path score, depth index, rank, parent's path score)
    curve, total = [], 0.0
    while heap and len(curve) < n:
        neg, d, r, parent = heapq.heappop(heap)
        total += math.exp(-neg)
        curve.append(total)
        if r + 1 < len(logq[d]):  # next sibling
            heapq.heappush(heap, (-(parent + logq[d][r + 1]), d, r + 1, parent))
        if d + 1 < len(logq):  # first child
            heapq.heappush(heap, (neg - logq[d + 1][0], d + 1, 0, -neg))
    return np.array(curve)[np.minimum(budgets, len(curve)) - 1]


class StateTracker:
    """Builds s_t = [conf_t, degen_t, hist_t, 1] from a round's candidates and the past rounds."""

    def __init__(self, window: int = 8, hist_prior: float = 2.0):
        self.history: deque[int] = deque(maxlen=window)
        self.hist_prior = hist_prior

    def signals(self, cand: Candidates) -> np.ndarray:
        return np.array(self.signal_list(cand))

    def signal_list(self, cand: Candidates) -> list[float]:
        """s_t as a list of floats (`signals` is its array). A read-back packed with the drafter's Gram
        matrix gives conf and degen in one compiled call (`packed_signals`)."""
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

    def feedback(self, record: dict) -> None:
        self.history.append(record["accepted"])


# ----------------------------------------------------------------------------- model (eqs. 14, 16, 17)


def saturation(params: SabaParams, s: np.ndarray, depth: int | None = None) -> tuple[float, float]:
    """(lambda_t, A_t) for state s_t: lambda = max(phi^T s, lam_min), A = clip(alpha^T s, 0, D)."""
    lam = max(float(np.dot(params.phi, s)), params.lam_min)
    a_sat = max(float(np.dot(params.alpha, s)), 0.0)
    return lam, (min(a_sat, depth) if depth is not None else a_sat)


def gain(budgets: np.ndarray, lam: float) -> np.ndarray:
    """G_t(B) = 1 - exp(-B / lambda_t) (eq. 16)."""
    return -np.expm1(-np.asarray(budgets, dtype=float) / lam)


def cost(budgets: np.ndarray, prefix_len: int, c: list[float]) -> np.ndarray:
    """C_t(B) = c0 + c1 B + c2 B prefix_t (eq. 17) [+ c3 log2(1 + B)] [+ c4 prefix_t], seconds per round."""
    b = np.asarray(budgets, dtype=float)
    out = c[0] + b * (c[1] + c[2] * prefix_len)
    if len(c) > 3:
        out = out + c[3] * np.log2(1.0 + b)
    return out + c[4] * prefix_len if len(c) > 4 else out


def round_cost(budget: int, prefix_len: int, c: list[float]) -> float:
    """`cost` of one budget as a Python float (for per-node loops such as CaDDTree's)."""
    out = c[0] + budget * (c[1] + c[2] * prefix_len)
    if len(c) > 3:
        out += c[3] * math.log2(1.0 + budget)
    return out + c[4] * prefix_len if len(c) > 4 else out


def cost_correction(params: SabaParams, budgets) -> np.ndarray:
    """delta_B of the cost table at `budgets` (linear in B between its budgets, flat beyond); 0 without one."""
    b = np.asarray(budgets, dtype=float)
    if params.cost_table is None:
        return np.zeros_like(b)
    return np.interp(b, params._cost_b, params._cost_d)


def round_costs(params: SabaParams, budgets, prefix_len: int) -> np.ndarray:
    """The calibration's C_t(B) in seconds: eq. 17 (`cost`) plus the cost table's correction."""
    return cost(budgets, prefix_len, params.c) + cost_correction(params, budgets)


def extra_tokens(params: SabaParams, budgets: np.ndarray, s: np.ndarray, depth: int | None = None,
                 mass: np.ndarray | None = None) -> np.ndarray:
    """E[a_t(B)] - 1, the draft tokens a round is expected to accept: A_t G_t(B) (eq. 16), or from
    the gain table (module doc); a 5-weight table also reads `mass`, M_t(B) at `params.mass_budgets`."""
    budgets = np.asarray(budgets, dtype=float)
    if params.gain_table is None:
        lam, a_sat = saturation(params, s, depth)
        return a_sat * gain(budgets, lam)
    if params.uses_mass:
        require(mass is not None and len(mass) == len(params._table_b),
                "this gain table needs the draft mass M_t(B) at its budgets (saba.draft_mass)")
        a = params._table_w[:, :4] @ s + params._table_w[:, 4] * mass
    else:
        a = params._table_w @ s
    a = np.maximum.accumulate(a)  # E[a_t(B)] at the table's budgets, non-decreasing in B
    extra = np.interp(np.log2(budgets), params._table_log2b, a) - 1.0
    return np.clip(extra, 0.0, depth if depth is not None else None)


def numerator(params: SabaParams, budgets: np.ndarray, s: np.ndarray, depth: int | None = None,
              k: float = 1.0, mass: np.ndarray | None = None) -> np.ndarray:
    """U_t's numerator: expected tokens 1 + k_t (E[a_t(B)] - 1) (extra tokens scaled by the online
    correction k_t), or the paper's G_t(B)."""
    if params.utility == "throughput":
        return 1.0 + k * extra_tokens(params, budgets, s, depth, mass)
    return gain(budgets, saturation(params, s, depth)[0])


def utility(params: SabaParams, budgets: np.ndarray, s: np.ndarray, prefix_len: int,
            depth: int | None = None, k: float = 1.0, mass: np.ndarray | None = None) -> np.ndarray:
    """U_t(B) over the budgets (eq. 14): expected tokens / cost, or the paper's G / C."""
    return numerator(params, budgets, s, depth, k, mass) / round_costs(params, budgets, prefix_len)


def choose(params: SabaParams, budgets: np.ndarray, s: np.ndarray, prefix_len: int, depth: int | None = None,
           k: float = 1.0, mass: np.ndarray | None = None) -> int:
    """B_t = argmax_B U_t(B); the smallest budget on ties."""
    return int(budgets[int(np.argmax(utility(params, budgets, s, prefix_len, depth, k, mass)))])


def prefers_ar(params: SabaParams, budgets: np.ndarray, s: np.ndarray, prefix_len: int,
               depth: int | None = None, k: float = 1.0, mass: np.ndarray | None = None) -> bool:
    """The AR gate: one AR step's utility 1 / C_AR(prefix) beats max_B U_t(B) (False without c_ar)."""
    if params.c_ar is None:
        return False
    c_ar = params.c_ar[0] + params.c_ar[1] * prefix_len
    return 1.0 / c_ar > float(utility(params, budgets, s, prefix_len, depth, k, mass).max())


def prefers_ar_after_draft(params: SabaParams, budgets: np.ndarray, s: np.ndarray, prefix_len: int,
                           depth: int | None = None, k: float = 1.0, mass: np.ndarray | None = None) -> bool:
    """The post-draft gate (module doc): with the draft sunk, one AR step 1 / C_AR(prefix) still
    beats max_B (1 + k A G(B)) / (C(B) - c_draft) (False without c_ar or with `post_gate` off)."""
    if params.c_ar is None or not params.post_gate:
        return False
    c_ar = params.c_ar[0] + params.c_ar[1] * prefix_len
    remaining = round_costs(params, budgets, prefix_len) - params.c_draft
    return 1.0 / c_ar > float((numerator(params, budgets, s, depth, k, mass) / remaining).max())


def decide(params: SabaParams, budgets: np.ndarray, s: np.ndarray, prefix_len: int, depth: int | None = None,
           k: float = 1.0, mass: np.ndarray | None = None) -> tuple[int, float]:
    """A drafted round's whole choice, each term computed once: (0, 0.0) when the post-draft gate
    declines (`prefers_ar_after_draft`), else (B_t = `choose`, `predicted_extra` at B_t)."""
    extra = extra_tokens(params, budgets, s, depth, mass)
    num = 1.0 + k * extra if params.utility == "throughput" else gain(budgets, saturation(params, s, depth)[0])
    costs = round_costs(params, budgets, prefix_len)
    if params.c_ar is not None and params.post_gate:
        c_ar = params.c_ar[0] + params.c_ar[1] * prefix_len
        if 1.0 / c_ar > float((num / (costs - params.c_draft)).max()):
            return 0, 0.0
    i = int(np.argmax(num / costs))
    return int(budgets[i]), float(extra[i])


def predicted_extra(params: SabaParams, s: np.ndarray, budget: int, depth: int | None = None,
                    mass: np.ndarray | None = None) -> float:
    """E[a_t(B)] - 1 at one budget: the draft tokens the uncorrected model expects a round to accept."""
    return float(extra_tokens(params, np.array([budget]), s, depth, mass)[0])


class GainCorrection:
    """k_t = (n0 + R) / (n0 + P) of the online gain correction (module doc); n0 = None: k_t = 1."""

    def __init__(self, n0: float | None):
        self.n0, self.predicted, self.realized = n0, 0.0, 0.0

    @property
    def k(self) -> float:
        return 1.0 if self.n0 is None else (self.n0 + self.realized) / (self.n0 + self.predicted)

    def add(self, predicted_extra: float, accepted: int) -> None:
        self.predicted += predicted_extra
        self.realized += accepted - 1


class GridUtility:
    """U_t(B) over a controller's fixed grid in plain Python floats: the per-round form of `decide` /
    `prefers_ar` for eq. 16's gain or a gain table without the draft-mass term, with every term that
    depends only on the grid computed once.

    Eq. 17 (plus the cost table) is affine in the prefix, C_t(B) = C(B, 0) + prefix * dC(B), so the
    grid's C(B, 0) and dC(B) are precomputed; a gain table's interpolation from its budgets to the
    grid's (in log2 B, as `extra_tokens`) is a fixed pair of table rows and a weight per grid budget.
    A round is then one pass over the grid of scalar ops (numpy's per-call overhead on a dozen-element
    array costs more than the arithmetic). Same model and argmax rule as `decide` (the smallest budget
    on ties); the values agree with it up to floating-point rounding (tests check the choices are equal).
    """

    def __init__(self, params: SabaParams, grid: np.ndarray):
        self.params, self.budgets = params, [float(b) for b in grid]
        c0 = round_costs(params, grid, 0)
        self.cost0, self.slope = c0.tolist(), (round_costs(params, grid, 1) - c0).tolist()
        self.table = None if params.gain_table is None else params._table_w.tolist()  # [budgets][4]
        self.knots = [] if params.gain_table is None else [_knot(params._table_log2b, math.log2(b)) for b in grid]

    @staticmethod
    def applies(params: SabaParams) -> bool:
        return params.gain_table is None or not params.uses_mass

    def extras(self, s: list[float], depth: int | None) -> tuple[list[float], list[float] | None]:
        """(E[a_t(B)] - 1 over the grid, G_t(B) over the grid or None with a gain table): `extra_tokens`."""
        if self.table is None:
            lam, a_sat = self.saturation(s, depth)
            gains = [-math.expm1(-b / lam) for b in self.budgets]
            return [a_sat * g for g in gains], gains
        a, top = [], -math.inf
        for w in self.table:  # E[a_t(B)] at the table's budgets, non-decreasing in B
            top = max(top, w[0] * s[0] + w[1] * s[1] + w[2] * s[2] + w[3] * s[3])
            a.append(top)
        cap = math.inf if depth is None else depth
        return [min(max(a[i] + t * (a[j] - a[i]) - 1.0, 0.0), cap) for i, j, t in self.knots], None

    def terms(self, s: list[float], prefix_len: int, depth: int | None, k: float):
        """(numerators, costs, extra tokens) over the grid: 1 + k E[a_t(B) - 1] (or the paper's G_t(B)),
        C_t(B), E[a_t(B)] - 1."""
        extra, gains = self.extras(s, depth)  # a gain table needs utility "throughput" (SabaParams)
        num = [1.0 + k * e for e in extra] if self.params.utility == "throughput" else gains
        costs = [c + prefix_len * d for c, d in zip(self.cost0, self.slope)]
        return num, costs, extra

    def decide(self, s: list[float], prefix_len: int, depth: int | None, k: float) -> tuple[int, float]:
        """`decide`'s (B_t, predicted extra at B_t), or (0, 0.0) when the post-draft gate declines:
        one pass over the grid (first maximum on ties)."""
        p = self.params
        num, costs, extra = self.terms(s, prefix_len, depth, k)
        gate = p.c_ar is not None and p.post_gate
        best_u = best_post = -math.inf
        best_b, best_e = 0.0, 0.0
        for b, n, cost, e in zip(self.budgets, num, costs, extra):
            if n / cost > best_u:
                best_u, best_b, best_e = n / cost, b, e
            if gate:
                best_post = max(best_post, n / (cost - p.c_draft))
        if gate and 1.0 / (p.c_ar[0] + p.c_ar[1] * prefix_len) > best_post:
            return 0, 0.0
        return int(best_b), best_e

    def saturation(self, s: list[float], depth: int | None) -> tuple[float, float]:
        """(lambda_t, A_t) as `saturation`, in floats."""
        p = self.params
        lam = max(sum(w * x for w, x in zip(p.phi, s)), p.lam_min)
        a_sat = max(sum(w * x for w, x in zip(p.alpha, s)), 0.0)
        return lam, (a_sat if depth is None else min(a_sat, depth))

    def prefers_ar(self, s: list[float], prefix_len: int, depth: int | None, k: float) -> bool:
        """`prefers_ar`: one AR step's utility beats max_B U_t(B) (False without c_ar)."""
        p = self.params
        if p.c_ar is None:
            return False
        num, costs, _ = self.terms(s, prefix_len, depth, k)
        return 1.0 / (p.c_ar[0] + p.c_ar[1] * prefix_len) > max(n / c for n, c in zip(num, costs))


def _knot(xp: np.ndarray, x: float) -> tuple[int, int, float]:
    """np.interp(x, xp, fp) as fp[i] + t (fp[j] - fp[i]) for any fp: (i, j, t), flat beyond the ends."""
    if x <= xp[0]:
        return 0, 0, 0.0
    if x >= xp[-1]:
        return len(xp) - 1, len(xp) - 1, 0.0
    j = int(np.searchsorted(xp, x, side="right"))
    i = j - 1
    return (i, i, 0.0) if x == xp[i] else (i, j, float((x - xp[i]) / (xp[j] - xp[i])))


class SabaController:
    """BudgetController: argmax of U_t over the grid (capped at `cap`), state from `StateTracker`."""

    name = "saba"

    def __init__(self, params: SabaParams, cap: int | None = None):
        grid = sorted(b for b in params.grid if cap is None or b <= cap)
        self.params = params
        self.grid = np.array(grid or [cap], dtype=float)
        self.max_budget = int(self.grid[-1])
        self.fast = GridUtility(params, self.grid) if GridUtility.applies(params) else None  # else numpy's `decide`
        warm_up()
        self.reset()

    def reset(self) -> None:
        """Per-decode state: history, last state, gate schedule and gain correction start afresh."""
        self.tracker = StateTracker(self.params.window, self.params.hist_prior)
        self.last_state: list[float] | None = None  # s_t of the last draft
        self.last_mass: np.ndarray | None = None  # M_t(B) of the last draft at the table's budgets
        self.depth: int | None = None
        self.skip, self.skip_left, self.probe = 1, 0, False
        self.correction = GainCorrection(self.params.gain_prior)
        self.predicted_extra = 0.0  # A_t G_t(B_t) of the last drafted round, uncorrected

    def speculate(self, prefix_len: int) -> bool:
        """The AR gate (module doc): False = run this round as one plain AR step."""
        if self.skip_left > 0:
            self.skip_left -= 1
            return False
        if self.probe or self.last_state is None:
            self.probe = False
            return True
        s = list(self.last_state)
        s[2] = self.tracker.hist()  # hist_t now; conf/degen of the last draft
        if self.fast is not None:
            ar = self.fast.prefers_ar(s, prefix_len, self.depth, self.correction.k)
        else:
            ar = prefers_ar(self.params, self.grid, np.array(s), prefix_len, self.depth, self.correction.k,
                            self.last_mass)
        if not ar:
            self.skip = 1
            return True
        self.skip_left, self.probe = self.skip - 1, True
        self.skip = min(2 * self.skip, self.params.max_skip)
        return False

    def budget(self, cand: Candidates, prefix_len: int) -> int:
        """B_t = argmax_B U_t(B) on this round's state, or 0 (an AR step) when the post-draft gate
        declines the drafted round."""
        p, s = self.params, self.tracker.signal_list(cand)
        mass = draft_mass(cand, p.mass_budgets) if p.uses_mass else None
        self.last_state, self.last_mass, self.depth = s, mass, cand.depth
        if self.fast is not None:
            b, extra = self.fast.decide(s, prefix_len, cand.depth, self.correction.k)
        else:
            b, extra = decide(p, self.grid, np.array(s), prefix_len, cand.depth, self.correction.k, mass)
        if b:
            self.predicted_extra = extra
        return b

    def feedback(self, record: dict) -> None:
        if record["budget"] > 0:  # hist_t and the gain correction are over drafted rounds
            self.tracker.feedback(record)
            self.correction.add(self.predicted_extra, record["accepted"])
