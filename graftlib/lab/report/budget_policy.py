"""Per-round budget policies against the same-prefix oracle, on replay records: where SABA loses, and how much of
the oracle's headroom a round's state predicts.

A round of a same-prefix replay (`graftlib.training.graft.replay`) is, per budget B of its grid, the accepted length
a_t(B) and the round latency l_t(B) (measured, or a cost profile's price where the replay walked: `priced`), so
TPS_t(B) = a_t(B) / l_t(B) and the oracle's B*_t = argmax_B TPS_t(B). A policy maps what a round knows before it
verifies to a budget and retains TPS_t(B_t) / TPS_t(B*_t) (the paper's Figure 6 measure).

`rounds` turns records into `Rounds` (plain arrays: one row per round, one column per budget). Policies:
  - `oracle`, `fixed(B)` and the best fixed budget chosen after the fact on the rounds it is scored on;
  - `reference`: the budget the replayed method chose (SABA's B_t, AR gate and online correction included);
  - `saba_model`: SABA's eq. 14-17 evaluated offline on s_t (no gate, no online correction);
  - `true_gain`: SABA's cost model C_t(B) with the realized a_t(B), the choice a perfect gain prediction makes;
  - `forecast`: SABA's cost model with the heap's own forecast of a_t(B) (its score mass), a cost-aware stop;
  - a `Predictor` fitted on other rounds (validation prompts) of the curve log TPS_t(B) less its mean over B, from
    the features a round has before it verifies (`methods.budget_predictor.features`): ridge, or k nearest rounds.
`decompose` splits SABA's loss against the oracle into its causes by swapping one model at a time for the truth:
gate and online correction (reference -> saba_model), gain (-> true_gain), cost (-> the oracle on SABA's grid) and
grid (-> the oracle on the replay's grid). `against_best_fixed` pools a policy per prompt against the best fixed
budget with a bootstrap interval over prompts (`metrics.ratio_ci`), as Figure 6 does; `tps_against` compares the
same-prefix throughput sum a_t / sum l_t (rounds weigh by their time) with the fixed budget of the most throughput
(`best_fixed_tps`); `timed_rows` compares decoded bench records with the fastest fixed run and with AR.

Invariants: every policy returns one budget of the rounds' grid per round; the oracle retains 1 in every round; a
predictor never sees the rounds it is scored on (`fit` and `choose` take different `Rounds`).
"""

import itertools
from dataclasses import dataclass, replace

import numpy as np

from graftlib.core.errors import require
from graftlib.lab.report.metrics import ratio_ci, summarize
from graftlib.lab.report.modeled import at_edge
from graftlib.methods.budget_predictor import BudgetPredictor, before_draft, features, ridge_curves


@dataclass(frozen=True)
class Rounds:
    """Replayed rounds as arrays: `budgets` [K] (0: a plain AR step), `tps` / `accepted` [N, K], `reference` [N]
    (the replayed method's budget), `state` [N, 4] (s_t), `prefix` [N], `prompt` [N] (a prompt's uid) and, where
    the replay recorded them (`budget_predictor.round_features`), `extra` [N, 2D] (per depth q1 and qk) and
    `mass` [N, K] (the heap's score mass at each budget); `last` [N, 4]: s_t of the prompt's previous round (NaN in
    its first), what the AR arm reads before the draft (`budget_predictor.before_draft`)."""

    budgets: np.ndarray
    tps: np.ndarray
    accepted: np.ndarray
    reference: np.ndarray
    state: np.ndarray
    prefix: np.ndarray
    prompt: np.ndarray
    extra: np.ndarray | None = None
    mass: np.ndarray | None = None
    last: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tps)

    def features(self) -> np.ndarray:
        """x_t per round (`graftlib.methods.budget_predictor.features`, the one definition a decode reads too)."""
        return features(self.state, self.prefix, self.extra, self.mass)

    def retained(self, choice: np.ndarray) -> np.ndarray:
        """TPS_t(B_t) / TPS_t(B*_t) per round for one chosen budget per round (each one of `budgets`)."""
        col = np.searchsorted(self.budgets, choice)
        require(bool(np.all(self.budgets[np.minimum(col, len(self.budgets) - 1)] == choice)),
                "a policy chose a budget outside the replay's grid")
        return self.tps[np.arange(len(self)), col] / self.tps.max(axis=1)


def rounds(lines: list[dict], profile=None) -> Rounds:
    """`Rounds` of replay lines (`replay_prompts`' JSON lines: one prompt each, its `uid` and `records`), priced by
    `profile` where given (a walked replay carries no times); only the budgets replayed in every round."""
    from graftlib.training.graft.replay import ReplayRecord, priced

    per_round = []
    for line in lines:
        recs = [ReplayRecord(**r) for r in line["records"]]
        recs = priced(recs, profile) if profile is not None else recs
        by_round: dict[int, list] = {}
        for r in recs:
            by_round.setdefault(r.round, []).append(r)
        per_round += [(line.get("uid", ""), group) for _, group in sorted(by_round.items())]
    require(per_round, "no replayed rounds")
    budgets = sorted(set.intersection(*({r.budget for r in g if not r.reference} for _, g in per_round)))
    require(budgets, "no budget was replayed in every round")
    tps, acc, ref, state, prefix, prompt, extra, mass = [], [], [], [], [], [], [], []
    for uid, group in per_round:
        grid = {r.budget: r for r in group if not r.reference}
        chosen = next((r for r in group if r.reference), None)
        tps.append([grid[b].tps for b in budgets])
        acc.append([grid[b].accepted for b in budgets])
        ref.append(chosen.budget if chosen is not None and chosen.budget in grid else -1)
        first = grid[budgets[0]]
        state.append(first.state)
        prefix.append(first.prefix_len)
        prompt.append(uid)
        f = chosen.features if chosen is not None else None
        extra.append(None if f is None else f["q1"] + f["qk"])
        at = dict(zip(sorted(grid), f["mass"], strict=True)) if f is not None else {}  # the replay grid's order
        mass.append([at[b] for b in budgets] if f is not None else None)
    known = all(e is not None for e in extra) and len({len(e) for e in extra}) == 1
    first = [i == 0 or prompt[i - 1] != prompt[i] for i in range(len(prompt))]
    last = [[np.nan] * len(state[i]) if first[i] else state[i - 1] for i in range(len(state))]
    return Rounds(np.array(budgets), np.array(tps, float), np.array(acc, float), np.array(ref), np.array(state, float),
                  np.array(prefix, float), np.array(prompt), np.array(extra, float) if known else None,
                  np.array(mass, float) if known else None, np.array(last, float))


# ----------------------------------------------------------------------------- policies


def oracle(R: Rounds) -> np.ndarray:
    return R.budgets[R.tps.argmax(axis=1)]


def fixed(R: Rounds, budget: int) -> np.ndarray:
    return np.full(len(R), budget)


def best_fixed(R: Rounds, among=None) -> int:
    """The budget (of `among`, default every positive one) whose mean retained share is highest on `R`."""
    among = [b for b in (R.budgets if among is None else among) if b > 0]
    return int(max(among, key=lambda b: R.retained(fixed(R, b)).mean()))


def reference(R: Rounds) -> np.ndarray:
    require(bool(np.all(R.reference >= 0)), "some rounds' reference budget was not replayed")
    return R.reference


def _on_grid(R: Rounds, grid) -> np.ndarray:
    grid = [b for b in grid if b in set(R.budgets.tolist())]
    require(grid, f"none of SABA's budgets {list(grid)} was replayed")
    return np.array(sorted(grid))


def saba_model(R: Rounds, params, depth: int) -> np.ndarray:
    """B_t of eqs. 14-17 on each round's s_t and prefix (SABA's grid within the replay's, no AR gate, k = 1)."""
    from graftlib.methods.saba import BudgetGrid

    grid = BudgetGrid(params, _on_grid(R, params.grid))
    return np.array([grid.choose(list(s), int(p), depth).budget for s, p in zip(R.state, R.prefix, strict=True)])


def true_gain(R: Rounds, params) -> np.ndarray:
    """argmax_B a_t(B) / C_t(B) over SABA's grid: its cost model with the realized accepted length."""
    from graftlib.methods.saba import round_costs

    grid = _on_grid(R, params.grid)
    cols = np.searchsorted(R.budgets, grid)
    best = [grid[np.argmax(R.accepted[i, cols] / round_costs(params, grid, int(p)))] for i, p in enumerate(R.prefix)]
    return np.array(best)


def oracle_on(R: Rounds, grid) -> np.ndarray:
    """The oracle restricted to `grid` (SABA's candidates)."""
    grid = _on_grid(R, grid)
    cols = np.searchsorted(R.budgets, grid)
    return grid[R.tps[:, cols].argmax(axis=1)]


def forecast(R: Rounds, params) -> np.ndarray:
    """A cost-aware stop on the round's own heap (CaDDTree's idea on GRAFT's TDES-ranked heap, offline): the budget
    of SABA's grid with the most forecast tokens per second, (1 + mass_t(B)) / C_t(B), where mass_t(B) is the heap's
    score mass of its first B pops (`budget_predictor.round_features`) and C_t(B) SABA's cost model."""
    from graftlib.methods.saba import round_costs

    require(R.mass is not None, "the forecast policy needs replays that record the heap's mass (round features)")
    grid = _on_grid(R, [b for b in params.grid if b > 0])
    cols = np.searchsorted(R.budgets, grid)
    return np.array([grid[np.argmax((1 + R.mass[i, cols]) / round_costs(params, grid, int(p)))]
                     for i, p in enumerate(R.prefix)])


def decompose(R: Rounds, params, depth: int) -> dict[str, float]:
    """SABA's mean loss against the oracle (1 - retained) split into its causes (module doc), each in points of
    retained oracle throughput; they sum to the total."""
    steps = {"saba": R.retained(reference(R)).mean(), "model": R.retained(saba_model(R, params, depth)).mean(),
             "gain": R.retained(true_gain(R, params)).mean(), "cost": R.retained(oracle_on(R, params.grid)).mean(),
             "grid": 1.0}
    names = list(steps)
    out = {"total": 1.0 - steps["saba"]}
    causes = {"model": "gate and online correction", "gain": "gain model G_t(B)", "cost": "cost model C_t(B)",
              "grid": "budget grid"}
    for a, b in itertools.pairwise(names):
        out[causes[b]] = steps[b] - steps[a]
    return out


# ----------------------------------------------------------------------------- predictors


@dataclass
class Predictor:
    """A per-round budget from the predicted relative curve log TPS_t(B) - mean_B (module doc). kind "ridge"
    (penalty `alpha` on standardized features) or "knn" (`k` nearest rounds, standardized features). Where the
    rounds it is fitted on have budget 0 (a plain AR step), a ridge fit also learns the AR arm: r_t = log TPS_t(0)
    - log TPS_t(B_t) of its own tree choice B_t, on what the round knows before the draft
    (`budget_predictor.before_draft`), with the same penalty; the round is an AR step where r_t > 0."""

    kind: str = "ridge"
    alpha: float = 1.0
    k: int = 25

    @property
    def name(self) -> str:
        return f"ridge(alpha={self.alpha:g})" if self.kind == "ridge" else f"knn(k={self.k})"

    def fit(self, R: Rounds) -> "Predictor":
        require(self.kind in ("ridge", "knn"), f"predictor kind {self.kind!r}: ridge or knn")
        T = _trees(R)
        x = T.features()
        self.mu, self.sd = x.mean(axis=0), x.std(axis=0) + 1e-9
        self.budgets = T.budgets
        y = np.log(T.tps)
        self.y = y - y.mean(axis=1, keepdims=True)
        self.x = (x - self.mu) / self.sd
        if self.kind == "ridge":
            self.w = _ridge(self.x, self.y, self.alpha)
        self.ar = None
        if self.kind == "ridge" and 0 in R.budgets and R.last is not None:
            rows = ~np.isnan(R.last[:, 0])
            if rows.sum() >= 2:
                tree = np.searchsorted(R.budgets, self.choose_tree(T))
                r = np.log(R.tps[:, 0]) - np.log(R.tps[np.arange(len(R)), tree])
                x0 = _before_draft(R)[rows]
                mu, sd = x0.mean(axis=0), x0.std(axis=0) + 1e-9
                self.ar = {"mu": mu, "sd": sd, "w": _ridge((x0 - mu) / sd, r[rows, None], self.alpha)[:, 0]}
        return self

    def curves(self, R: Rounds) -> np.ndarray:
        R = _trees(R)
        require(np.array_equal(R.budgets, self.budgets), "a predictor chooses among the budgets it was fitted on")
        if self.kind == "ridge":
            return ridge_curves(R.features(), self.mu, self.sd, self.w)
        x = (R.features() - self.mu) / self.sd
        d = ((x[:, None, :] - self.x[None, :, :]) ** 2).sum(axis=2)
        near = np.argsort(d, axis=1)[:, : self.k]
        return self.y[near].mean(axis=1)

    def choose_tree(self, R: Rounds) -> np.ndarray:
        """B_t among the positive budgets (the curve's argmax), whatever the AR arm says."""
        return self.budgets[self.curves(R).argmax(axis=1)]

    def choose(self, R: Rounds) -> np.ndarray:
        """B_t per round: 0 where the AR arm takes the AR step (never in a prompt's first round), else the tree's."""
        choice = self.choose_tree(R)
        if getattr(self, "ar", None) is not None and 0 in R.budgets:
            rows = ~np.isnan(R.last[:, 0])
            ar = np.zeros(len(R), bool)
            ar[rows] = ridge_curves(_before_draft(R)[rows], self.ar["mu"], self.ar["sd"], self.ar["w"]) > 0
            choice = np.where(ar, 0, choice)
        return choice

    def shipped(self, meta: dict) -> BudgetPredictor:
        """This fitted ridge predictor as the decode's `BudgetPredictor` (the same curves on the same features)."""
        require(self.kind == "ridge" and hasattr(self, "w"), "only a fitted ridge predictor ships")
        ar = None if self.ar is None else {k: np.asarray(v).tolist() for k, v in self.ar.items()}
        return BudgetPredictor(self.budgets.tolist(), self.mu.tolist(), self.sd.tolist(), self.w.tolist(), meta, ar)


def _ridge(x: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    """Ridge weights [F + 1, K] of `y` [N, K] on standardized `x` [N, F] with an unpenalized intercept."""
    a = np.column_stack([np.ones(len(x)), x])
    penalty = alpha * np.eye(a.shape[1])
    penalty[0, 0] = 0.0
    return np.linalg.solve(a.T @ a + penalty, a.T @ y)


def _trees(R: Rounds) -> Rounds:
    """`R` without budget 0: the tree budgets a curve is fitted over."""
    return on_budgets(R, [b for b in R.budgets.tolist() if b > 0]) if 0 in R.budgets else R


def _before_draft(R: Rounds) -> np.ndarray:
    """The AR arm's features per round (NaN in a prompt's first round): the last draft's conf and degen, hist_t
    now (a round's hist does not depend on its own draft), prefix_t."""
    return before_draft(R.last, R.state[:, 2], R.prefix)


def cross_validated(R: Rounds, candidates: list[Predictor], folds: int = 4) -> tuple[Predictor, dict]:
    """The candidate with the highest mean retained share over `folds` folds of `R`'s prompts (each fold scored by
    a fit on the others), refitted on all of `R`; and every candidate's cross-validated share."""
    prompts = np.array(sorted(set(R.prompt.tolist())))
    require(len(prompts) >= folds, f"{len(prompts)} prompts: too few for {folds} folds")
    fold_of = {p: i % folds for i, p in enumerate(prompts)}
    f = np.array([fold_of[p] for p in R.prompt])
    scores = {}
    for c in candidates:
        got = np.empty(len(R))
        for i in range(folds):
            c.fit(subset(R, f != i))
            held = subset(R, f == i)
            got[f == i] = held.retained(c.choose(held))
        scores[c.name] = float(got.mean())
    best = max(candidates, key=lambda c: scores[c.name])
    return best.fit(R), scores


def on_budgets(R: Rounds, budgets) -> Rounds:
    """`R` with only `budgets` (each replayed in `R`), e.g. the grid two replays share."""
    cols = np.searchsorted(R.budgets, _on_grid(R, budgets))
    require(len(cols) == len(set(budgets)), f"budgets {sorted(set(budgets) - set(R.budgets.tolist()))} were not "
                                            "replayed")
    return replace(R, budgets=R.budgets[cols], tps=R.tps[:, cols], accepted=R.accepted[:, cols],
                   mass=None if R.mass is None else R.mass[:, cols])


def subset(R: Rounds, mask: np.ndarray) -> Rounds:
    rows = {k: getattr(R, k) for k in ("tps", "accepted", "reference", "state", "prefix", "prompt", "extra", "mass",
                                       "last")}
    return replace(R, **{k: None if v is None else v[mask] for k, v in rows.items()})


def against_best_fixed(R: Rounds, choice: np.ndarray, best: int) -> dict:
    """A policy's mean retained share, the best fixed budget's, their ratio pooled over rounds and its bootstrap
    interval over prompts (as `regime_tables.against_fixed`)."""
    got, base = R.retained(choice), R.retained(fixed(R, best))
    prompts = sorted(set(R.prompt.tolist()))
    num = [float(got[R.prompt == p].sum()) for p in prompts]
    den = [float(base[R.prompt == p].sum()) for p in prompts]
    return {"retained_oracle": float(got.mean()), "best_fixed_retained": float(base.mean()),
            "vs_best_fixed": float(got.mean() / base.mean()), "ci": ratio_ci(num, den), "prompts": len(prompts),
            "rounds": len(R)}


# ----------------------------------------------------------------------------- the policies' table


POLICY_KINDS = {"oracle": "same-prefix oracle", "best_fixed": "best fixed B (after the fact)",
                "best_fixed_val": "best fixed B on validation", "saba": "SABA (graft)",
                "saba_model": "SABA's model, no gate", "predictor": "predictor fitted on validation",
                "stop": "heap's forecast over the grid (graft+stop's ratio)"}
PREDICTORS = [Predictor("ridge", alpha) for alpha in (1, 10, 100, 1000)] + [Predictor("knn", k=k) for k in (10, 25, 50)]


def _tokens_seconds(R: Rounds, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per round a_t(B_t) and l_t(B_t) = a_t(B_t) / TPS_t(B_t) for one chosen budget per round."""
    rows, col = np.arange(len(R)), np.searchsorted(R.budgets, choice)
    acc = R.accepted[rows, col]
    return acc, acc / R.tps[rows, col]


def same_prefix_tps(R: Rounds, choice: np.ndarray, prompt=None) -> float:
    """Tokens per second of one budget per round along the replayed trajectory: sum a_t(B_t) / sum l_t(B_t) (over
    `prompt`'s rounds where given)."""
    acc, secs = _tokens_seconds(R, choice)
    rows = slice(None) if prompt is None else R.prompt == prompt
    return float(acc[rows].sum() / secs[rows].sum())


def best_fixed_tps(R: Rounds) -> int:
    """The positive budget with the highest same-prefix throughput on `R` (the best fixed budget by tokens per
    second, which may differ from `best_fixed`'s by the mean retained share: rounds weigh by their time)."""
    return int(max((b for b in R.budgets if b > 0), key=lambda b: same_prefix_tps(R, fixed(R, b))))


def tps_against(R: Rounds, choice: np.ndarray, base: np.ndarray, level: float = 0.95, resamples: int = 2000,
                seed: int = 0) -> tuple[float, tuple[float, float] | None]:
    """same_prefix_tps(choice) / same_prefix_tps(base) and its percentile bootstrap interval over prompts (a
    prompt's rounds resampled together; None with fewer than 3 prompts). Deterministic (fixed seed)."""
    (a, l), (a_base, l_base) = _tokens_seconds(R, choice), _tokens_seconds(R, base)
    prompts = sorted(set(R.prompt.tolist()))
    per = np.array([[x[R.prompt == p].sum() for x in (a, a_base, l, l_base)] for p in prompts])  # [P, 4]
    ratio = float((per[:, 0].sum() / per[:, 2].sum()) / (per[:, 1].sum() / per[:, 3].sum()))
    if len(prompts) < 3:
        return ratio, None
    s = per[np.random.default_rng(seed).integers(0, len(prompts), size=(resamples, len(prompts)))].sum(axis=1)
    boot = (s[:, 0] / s[:, 2]) / (s[:, 1] / s[:, 3])
    tail = 100 * (1 - level) / 2
    return ratio, (float(np.percentile(boot, tail)), float(np.percentile(boot, 100 - tail)))


def policy_rows(val: Rounds, held: Rounds, params, depth: int) -> list[dict]:
    """Every policy on the held-out rounds `held` against the best fixed budget chosen after the fact on them (the
    grid brackets it or `best_fixed_at_edge` says so); what a policy fits (the validation-best fixed budget, the
    predictor chosen by cross-validation) is fitted on `val` only. Per policy: `retained_oracle` (Figure 6's
    per-round mean), `vs_best_fixed` and its interval over prompts (`against_best_fixed`), and `tps_vs_best_fixed`
    with `tps_ci_low`, `tps_ci_high`: the same-prefix throughput against the fixed budget of the most throughput
    (`best_fixed_tps_B`, `tps_against`); `kind` names the policy across regimes (`POLICY_KINDS`)."""
    shared = [b for b in held.budgets.tolist() if b in set(val.budgets.tolist())]
    val, held = on_budgets(val, shared), on_budgets(held, shared)
    if val.mass is None or held.mass is None:  # a replay without round features: s_t and the prefix alone
        val, held = (replace(R, extra=None, mass=None) for R in (val, held))
    best = best_fixed(held)
    if len(set(val.prompt.tolist())) >= 4:
        predictor, cv = cross_validated(val, PREDICTORS)
        fitted = f"predictor on validation ({predictor.name}, cv {cv[predictor.name]:.3f})"
    else:  # too few validation prompts to cross-validate: the middle penalty
        predictor = Predictor("ridge", 100).fit(val)
        fitted = f"predictor on validation ({predictor.name}, not cross-validated)"
    policies = {"oracle": ("oracle (same prefix)", oracle(held)),
                "best_fixed": (f"best fixed (after the fact, B = {best})", fixed(held, best)),
                "best_fixed_val": (f"best fixed on validation (B = {best_fixed(val)})", fixed(held, best_fixed(val))),
                "saba": ("SABA (graft, the paper's)", reference(held)),
                "saba_model": ("SABA's model offline (no gate)", saba_model(held, params, depth)),
                "predictor": (fitted, predictor.choose(held))}
    if held.mass is not None:
        # graft+stop's ratio (1 + mass) / C over the replayed grid: the decode stops at its first peak over every pop
        policies["stop"] = ("forecast argmax over the grid (graft+stop's ratio)", forecast(held, params))
    best_tps = best_fixed_tps(held)
    ends = (held.budgets[held.budgets > 0].min(), held.budgets.max())  # a best at either is not bracketed
    rows = []
    for kind, (name, choice) in policies.items():
        s = against_best_fixed(held, choice, best)
        tps, tps_ci = tps_against(held, choice, fixed(held, best_tps))
        rows.append({"policy": name, "kind": kind, "retained_oracle": s["retained_oracle"],
                     "vs_best_fixed": s["vs_best_fixed"],
                     "ci_low": s["ci"][0] if s["ci"] else None, "ci_high": s["ci"][1] if s["ci"] else None,
                     "best_fixed_B": best, "best_fixed_at_edge": best in ends, "prompts": s["prompts"],
                     "rounds": s["rounds"],
                     "validation_prompts": len(set(val.prompt.tolist())), "tps_vs_best_fixed": tps,
                     "tps_ci_low": tps_ci[0] if tps_ci else None, "tps_ci_high": tps_ci[1] if tps_ci else None,
                     "best_fixed_tps_B": best_tps,
                     "best_fixed_tps_at_edge": best_tps in ends})
    return rows


def timed_rows(records: list[dict], fixed_methods=("ddtree", "ddtree+tdes"),
               policies=("graft", "graft+stop", "graft+pred"),
               time: str = "speedup") -> list[dict]:
    """Decoded bench records (one task, interleaved per prompt): each policy's speedup over AR and its ratio to the
    best fixed budget, the run of `fixed_methods` fastest by `time` ("speedup": wall clock; "modeled_speedup")
    after the fact, with bootstrap intervals over prompts (`metrics.speedup_ci`); `best_fixed_at_edge` says when
    that run's budget lies at the edge of its method's grid. Without fixed runs (a set decoded against AR only)
    the ratio columns are None."""
    rows = summarize(records)
    fixed_rows = [r for r in rows if r["method"] in fixed_methods]
    best = max(fixed_rows, key=lambda r: r[time]) if fixed_rows else None
    against = {r["key"]: r for r in summarize(records, baseline=best["key"])} if best else {}
    ci_of = "speedup_ci" if time == "speedup" else "modeled_speedup_ci"
    edge = at_edge(best["budget"], [f["budget"] for f in fixed_rows if f["method"] == best["method"]]) if best else None
    out = []
    for r in (r for r in rows if r["method"] in policies):
        vs = against.get(r["key"])
        out.append({"policy": r["key"], "prompts": r["prompts"], "mat": r["mat"], "mean_nodes": r["mean_nodes"],
                    "ar_share": r["ar_share"], "exact": r["exact"], "vs_ar": r[time], "vs_ar_ci": r[ci_of],
                    "best_fixed": best["key"] if best else None,
                    "best_fixed_at_edge": edge,
                    "vs_best_fixed": vs[time] if vs else None, "vs_best_fixed_ci": vs[ci_of] if vs else None})
    return out


COMPOSITE = "per-category best"  # each category at its own best fixed run, chosen after the fact


def mix_rows(categories: dict[str, list[dict]], fixed_methods=("ddtree", "ddtree+tdes"),
             policies=("graft", "graft+stop", "graft+pred"), time: str = "speedup") -> list[dict]:
    """The mixed workload (`graftlib.lab.run.mix`): decoded bench records per category (interleaved per prompt, AR
    bracketing). Per category and pooled over every prompt (`category` "all"), each policy's ratio by `time`
    ("speedup": wall clock; "modeled_speedup") to the best single fixed run of `fixed_methods` for the whole mix
    (`vs_best_fixed`, chosen after the fact), to the category's own best fixed run (`vs_category_best`) and to AR
    (`vs_ar`), each with its bootstrap interval over prompts (`metrics.speedup_ci`); pooled, the composite of each
    category at its own best fixed run (`COMPOSITE`) is one more policy."""
    ci_of = "speedup_ci" if time == "speedup" else "modeled_speedup_ci"
    tagged = {c: [dict(r, uid=f"{c}/{r['uid']}") for r in recs] for c, recs in categories.items()}
    pooled = [r for recs in tagged.values() for r in recs]
    fixed_keys = sorted({r["key"] for r in pooled if r["method"] in fixed_methods})
    require(fixed_keys, f"the mix has no fixed run of {list(fixed_methods)}")
    missing = {c: k for c, recs in tagged.items() for k in fixed_keys if k not in {r["key"] for r in recs}}
    require(not missing, f"every category runs every fixed budget; missing: {missing}")

    summaries: dict = {}  # one summary per (records, baseline): every key's row at once

    def against(recs: list[dict], key: str, base: str) -> dict:
        at = (id(recs), base)
        if at not in summaries:
            summaries[at] = {r["key"]: r for r in summarize(recs, baseline=base)}
        return summaries[at][key]

    best = max(fixed_keys, key=lambda k: against(pooled, k, "ar")[time])
    own = {c: max(fixed_keys, key=lambda k, recs=recs: against(recs, k, "ar")[time]) for c, recs in tagged.items()}
    composite = [dict(r, key=COMPOSITE, method=COMPOSITE) for c, recs in tagged.items() for r in recs
                 if r["key"] == own[c]]
    rows = []
    for c, recs in [*tagged.items(), ("all", pooled + composite)]:
        keys = {r["method"]: r["key"] for r in recs if r["method"] in (*policies, COMPOSITE)}
        for method, key in keys.items():
            vs = {name: against(recs, key, base) for name, base in
                  (("best", best), ("ar", "ar"), ("own", own.get(c, best)))}
            rows.append({"category": c, "policy": key, "kind": method, "vs_best_fixed": vs["best"][time],
                         "ci_low": (vs["best"][ci_of] or (None, None))[0],
                         "ci_high": (vs["best"][ci_of] or (None, None))[1], "best_fixed": best,
                         "vs_category_best": vs["own"][time] if c != "all" else None,
                         "vs_category_best_ci": vs["own"][ci_of] if c != "all" else None,
                         "category_best": own.get(c), "vs_ar": vs["ar"][time], "vs_ar_ci": vs["ar"][ci_of],
                         "prompts": vs["best"]["prompts"], "ar_share": vs["best"]["ar_share"],
                         "exact": vs["best"]["exact"]})
    return rows
