"""SABA fitting: the least-squares fits behind a calibration (`graftlib.methods.saba.SabaParams`).

Inputs are same-prefix replay measurements (`graftlib.training.graft.replay`): per (round, budget B)
the latency l_t(B) at prefix P_t and the accepted length a_t(B) with the round's state s_t.
- `fit_cost`: eq. 17's c (and the AR step's c_ar) by non-negative least squares, so the fitted
  C_t never gets cheaper with B or the prefix (`nonneg_lstsq`, exact over subsets of columns);
- `fit_cost_table`: per budget, the median residual of eq. 17, made non-decreasing in B;
- `fit_rows_cost`: what each LM-head row of the greedy walk costs beyond the mean at its budget
  (the cost profile's rows term; on a CPU the head is one matvec per visited row);
- `fit_gain`: eq. 16's (phi, alpha) by L-BFGS on a_t(B) = 1 + A_t G_t(B);
- `fit_gain_table`: per budget, least squares w_B of E[a_t(B)] = w_B^T s_t;
- `calibration_meta`: the provenance stored with the fitted parameters.
What each model means is in `graftlib.methods.saba` (the paper's) and `graftlib.methods.saba_extensions`
(the tables); why the tables exist, in docs/saba.md.
"""

import math
import time

import numpy as np
import torch

from graftlib.core.errors import require
from graftlib.methods.saba import cost

INTERCEPT_FLOOR = 0.01  # c0, a0 >= this share of the fastest measured round / AR step (`fit_cost`)


def nonneg_lstsq(x: np.ndarray, y: np.ndarray, lower: np.ndarray | None = None) -> np.ndarray:
    """argmin ||x c - y|| subject to c >= lower (default 0), exactly, by least squares over every
    subset of free columns (x has a handful of columns: 2^k - 1 small solves); a lower bound is
    the substitution c = lower + c', c' >= 0."""
    if lower is not None:
        lower = np.asarray(lower, dtype=float)
        return lower + nonneg_lstsq(x, y - x @ lower)
    k = x.shape[1]
    best, best_sse = np.zeros(k), float(y @ y)
    for mask in range(1, 2 ** k):
        free = [j for j in range(k) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(x[:, free], y, rcond=None)
        if (sol < 0).any():
            continue
        coef = np.zeros(k)
        coef[free] = sol
        sse = float(((y - x @ coef) ** 2).sum())
        if sse < best_sse:
            best, best_sse = coef, sse
    return best


def fit_cost(budgets, prefix_lens, latency_s, concave: bool = True,
             shared_prefix: bool = True) -> tuple[list[float], list[float] | None, float]:
    """Non-negative least squares for eq. 17's c and the AR step's c_ar, from rounds measured at
    (B, prefix); rows with B = 0 are AR steps (without any, c_ar is None). Returns (c, c_ar, R^2).

    `concave` adds c3 log2(1 + B), `shared_prefix` the prefix term c4 P common to rounds and AR
    steps (module doc; c_ar = (a0, c4)); without it an AR step gets its own slope (a0, a1). c has
    3 entries (the paper's), 4 (c3) or 5 (c3, c4; c3 = 0 when not `concave`).
    A negative coefficient fitted on noisy timings over short validation prefixes would make a
    node cheaper the longer the prefix (for P > -c1/c2 the model then prefers the largest tree),
    so all are constrained to >= 0 (`nonneg_lstsq`): C_t stays increasing in B and P. The
    intercepts c0 and a0 are held at >= INTERCEPT_FLOOR of the fastest such measured step: no
    forward is free, and a zero intercept (the prefix slope absorbing it on timings at a few short
    prefixes) would price a round at prefix 0 at nothing (`CostProfile` refuses it)."""
    b = np.asarray(budgets, dtype=float)
    p = np.asarray(prefix_lens, dtype=float)
    y = np.asarray(latency_s, dtype=float)
    spec, ar = (b > 0).astype(float), (b == 0).astype(float)
    require(len(y) >= 3 and len({(bb, pp) for bb, pp in zip(b.tolist(), p.tolist()) if bb > 0}) >= 3,
            "cost fit needs at least 3 distinct (budget, prefix) points with budget > 0")
    cols = [spec, spec * b, spec * b * p]
    if concave or shared_prefix:
        cols.append(spec * np.log2(1.0 + b) if concave else np.zeros_like(b))
    if shared_prefix:
        cols.append(p)
    n_c = len(cols)
    if ar.any():
        cols += [ar] if shared_prefix else [ar, ar * p]
    x = np.stack(cols, axis=1)
    lower = np.zeros(x.shape[1])
    lower[0] = INTERCEPT_FLOOR * float(y[b > 0].min())
    if ar.any():
        lower[n_c] = INTERCEPT_FLOOR * float(y[b == 0].min())
    coef = nonneg_lstsq(x, y, np.maximum(lower, 0.0))
    resid = y - x @ coef
    r2 = 1.0 - float(resid @ resid) / max(float(((y - y.mean()) ** 2).sum()), 1e-30)
    c = coef[:n_c].tolist()
    c_ar = None
    if ar.any():
        c_ar = [float(coef[n_c]), c[4]] if shared_prefix else coef[n_c:].tolist()
    return c, c_ar, r2


def fit_cost_table(budgets, prefix_lens, latency_s, c: list[float]) -> dict[str, float]:
    """The cost table (module doc) for eq. 17's fitted `c`: per budget B >= 1 the median residual
    latency - C(B, P; c) of the rounds measured at B, raised where needed so that C(B, 0) + delta_B is
    non-decreasing in B (a bigger tree never costs less). Rows with B = 0 (AR steps) are ignored."""
    b = np.asarray(budgets, dtype=float)
    p = np.asarray(prefix_lens, dtype=float)
    y = np.asarray(latency_s, dtype=float)
    spec = b > 0
    require(spec.any(), "cost table fit needs rounds with budget >= 1")
    resid = y - cost(b, p, c)  # elementwise over (B, P)
    grid = np.unique(b[spec])
    smooth0 = cost(grid, 0, c)  # eq. 17 at prefix 0 on the table's budgets
    delta = np.array([np.median(resid[b == bb]) for bb in grid])
    delta = np.maximum.accumulate(smooth0 + delta) - smooth0
    return {str(int(bb)): float(d) for bb, d in zip(grid, delta)}


def fit_rows_cost(budgets, prefix_lens, latency_s, rows, c: list[float],
                  cost_table: dict[str, float] | None) -> dict:
    """The cost profile's rows term `{"h", "ref"}` (`SabaParams.rows_cost`) from the drafted rounds
    (B >= 1; AR steps ignored): ref(B) the mean rows the rounds at B paid (a round's greedy walk reads
    `accepted` LM-head rows), h the least-squares slope through 0, clipped at 0, of the residual
    latency - C(B, P; c) - delta_B on rows - ref(B). Same-prefix replay times every budget of a round,
    so the rows vary widely at each B and h is well determined."""
    b = np.asarray(budgets, dtype=float)
    p = np.asarray(prefix_lens, dtype=float)
    y = np.asarray(latency_s, dtype=float)
    n = np.asarray(rows, dtype=float)
    spec = b > 0
    require(spec.any() and len(b) == len(p) == len(y) == len(n), "rows cost fit needs drafted rounds with "
            "budgets, prefixes, latencies and rows of one length")
    b, p, y, n = b[spec], p[spec], y[spec], n[spec]
    delta = np.array([(cost_table or {}).get(str(int(bb)), 0.0) for bb in b])
    resid = y - cost(b, p, c) - delta
    ref = {int(bb): float(n[b == bb].mean()) for bb in np.unique(b)}
    x = n - np.array([ref[int(bb)] for bb in b])
    h = max(float(x @ resid) / float(x @ x), 0.0) if float(x @ x) > 0 else 0.0
    return {"h": h, "ref": {str(bb): max(r, 1.0) for bb, r in ref.items()}}


def fit_gain(states, budgets, accepted, lam_min: float = 0.5, depth: int | None = None,
             steps: int = 200) -> tuple[list[float], list[float], float]:
    """Fit (phi, alpha) of a(B) = 1 + A_t (1 - exp(-B / lambda_t)) by least squares (float64 L-BFGS).

    `states` [N, 4] (s_t of each sample's round), `budgets` [N], `accepted` [N] (a_t(B), bonus
    included). Starts from a bias-only model whose scale is chosen on a coarse grid. Returns
    (phi, alpha, RMSE in accepted tokens).
    """
    s = torch.as_tensor(np.asarray(states, dtype=float))
    b = torch.as_tensor(np.asarray(budgets, dtype=float))
    a = torch.as_tensor(np.asarray(accepted, dtype=float))
    require(s.ndim == 2 and s.shape[1] == 4 and len(s) == len(b) == len(a) and len(a) >= 8,
            "gain fit needs >= 8 samples with 4-entry states")

    def predict(phi, alpha):
        lam = (s @ phi).clamp_min(lam_min)
        sat = (s @ alpha).clamp(0.0, depth if depth is not None else math.inf)
        return 1.0 + sat * -torch.expm1(-b / lam)

    a0 = max(float((a - 1).clamp_min(0).max()), 1e-3)
    alpha = torch.tensor([0.0, 0.0, 0.0, a0], dtype=torch.float64)
    scales = [lam_min * 2 ** k for k in range(12)]
    best = min(scales, key=lambda lam: float(((predict(torch.tensor([0.0, 0, 0, lam], dtype=torch.float64), alpha)
                                                - a) ** 2).mean()))
    phi = torch.tensor([0.0, 0.0, 0.0, best], dtype=torch.float64, requires_grad=True)
    alpha.requires_grad_(True)
    opt = torch.optim.LBFGS([phi, alpha], max_iter=steps, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-12, tolerance_change=1e-14)

    def closure():
        opt.zero_grad()
        loss = ((predict(phi, alpha) - a) ** 2).mean()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        rmse = float(((predict(phi, alpha) - a) ** 2).mean().sqrt())
    return phi.detach().tolist(), alpha.detach().tolist(), rmse


def fit_gain_table(states, budgets, accepted) -> tuple[dict[str, list[float]], float]:
    """Least squares w_B per budget of E[a_t(B)] = w_B^T s_t (the gain table, module doc); returns the
    table and the RMSE in accepted tokens (before the monotone/clip post-processing)."""
    s = np.asarray(states, dtype=float)
    b = np.asarray(budgets)
    a = np.asarray(accepted, dtype=float)
    require(s.ndim == 2 and s.shape[1] == 4 and len(s) == len(b) == len(a), "gain table fit needs 4-entry states")
    table, sse = {}, 0.0
    for budget in sorted(set(b.tolist())):
        rows = b == budget
        require(rows.sum() >= 4, f"gain table fit: budget {budget} has fewer than 4 samples")
        w, *_ = np.linalg.lstsq(s[rows], a[rows], rcond=None)
        table[str(int(budget))] = w.tolist()
        sse += float(((s[rows] @ w - a[rows]) ** 2).sum())
    return table, math.sqrt(sse / len(a))


def calibration_meta(pair_desc: dict, **extra) -> dict:
    """Provenance stored with fitted parameters (hardware, target, drafter, date, ...)."""
    return {"source": "graft calibrate", "date": time.strftime("%Y-%m-%d %H:%M:%S"), **pair_desc, **extra}
