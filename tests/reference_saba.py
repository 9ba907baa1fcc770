"""The plain SABA utility the library's one evaluator (`graftlib.methods.saba.BudgetGrid`) is tested
against: eqs. 14, 16 and 17 with graftlib's extensions, written with numpy arrays over the budgets,
term by term as the module docstrings state them. Written for reading, not speed."""

import math

import numpy as np

from graftlib.methods.saba import cost, gain
from graftlib.methods.saba_extensions import table_correction
from graftlib.methods.saba_params import SabaParams


def extra_tokens(params: SabaParams, budgets, s, depth: int | None = None) -> np.ndarray:
    """E[a_t(B)] - 1: A_t G_t(B) (eq. 16), or the gain table's w_B^T s_t (running max over the table's
    budgets, interpolated on log2 B, clipped to [0, D]); at most B."""
    budgets, s = np.asarray(budgets, dtype=float), np.asarray(s, dtype=float)
    if params.gain_table is None:
        lam = max(float(np.dot(params.phi, s)), params.lam_min)
        a_sat = max(float(np.dot(params.alpha, s)), 0.0)
        a_sat = a_sat if depth is None else min(a_sat, depth)
        return np.minimum(a_sat * gain(budgets, lam), budgets)
    rows = sorted((int(b), w) for b, w in params.gain_table.items())
    a = np.maximum.accumulate(np.array([w for _, w in rows]) @ s)
    extra = np.interp(np.log2(budgets), np.log2([b for b, _ in rows]), a) - 1.0
    return np.minimum(np.clip(extra, 0.0, depth), budgets)


def numerator(params: SabaParams, budgets, s, depth=None, k: float = 1.0) -> np.ndarray:
    """1 + k (E[a_t(B)] - 1), or the paper's G_t(B)."""
    if params.utility == "throughput":
        return 1.0 + k * extra_tokens(params, budgets, s, depth)
    lam = max(float(np.dot(params.phi, s)), params.lam_min)
    return gain(budgets, lam)


def costs(params: SabaParams, budgets, prefix_len: int) -> np.ndarray:
    """C_t(B): eq. 17 plus the cost table's correction."""
    return cost(budgets, prefix_len, params.c) + table_correction(params.cost_table, budgets)


def utility(params: SabaParams, budgets, s, prefix_len: int, depth=None, k: float = 1.0) -> np.ndarray:
    """U_t(B) (eq. 14)."""
    return numerator(params, budgets, s, depth, k) / costs(params, budgets, prefix_len)


def choose(params: SabaParams, budgets, s, prefix_len: int, depth=None, k: float = 1.0) -> int:
    """argmax_B U_t(B), the smallest budget on ties."""
    return int(np.asarray(budgets)[int(np.argmax(utility(params, budgets, s, prefix_len, depth, k)))])


def ar_step(params: SabaParams, prefix_len: int) -> float:
    return 1.0 / (params.c_ar[0] + params.c_ar[1] * prefix_len)


def prefers_ar(params: SabaParams, budgets, s, prefix_len: int, depth=None, k: float = 1.0) -> bool:
    """The pre-draft gate: one AR step beats every budget (False without c_ar)."""
    return params.c_ar is not None and ar_step(params, prefix_len) > float(
        utility(params, budgets, s, prefix_len, depth, k).max())


def prefers_ar_after_draft(params: SabaParams, budgets, s, prefix_len: int, depth=None, k: float = 1.0) -> bool:
    """The post-draft gate: one AR step beats max_B numerator / (C_t(B) - c_draft)."""
    if params.c_ar is None or not params.post_gate:
        return False
    remaining = costs(params, budgets, prefix_len) - params.c_draft
    return ar_step(params, prefix_len) > float((numerator(params, budgets, s, depth, k) / remaining).max())


def round_cost(budget: int, prefix_len: int, c: list[float]) -> float:
    """Eq. 17 for one budget, in Python floats term by term (`saba.cost` is its array form)."""
    out = c[0] + budget * (c[1] + c[2] * prefix_len)
    if len(c) > 3:
        out += c[3] * math.log2(1.0 + budget)
    return out + c[4] * prefix_len if len(c) > 4 else out
