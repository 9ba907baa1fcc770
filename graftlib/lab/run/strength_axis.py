"""The strength axis: each claim's modeled ratio against the drafter's strength, under the paper's costs.

At every strength s of the axis the DFlash drafter is the construction of `graftlib.models.strength` with the
task's calibrated shape (lam, kappa: `shape`) and s moved (its temperature refitted at that s on the task's
validation prompts, `strength.fit_temperature`),
and Tables 1-2's DFlash-drafted runs are walked and priced by the paper's A100 costs: the chain,
DDTree at the paper regime's budgets, +TDES, +SABA, GRAFT (`axis_runs`). EAGLE-3 and OPT-Tree keep
the real drafter (they do not move with s): decoded once, in the paper regime. From each point's
records (`axis_table`): the claims' ratios and verdicts (`graftlib.lab.report.claims`), the MATs, the mean
nodes per round SABA gives +SABA and GRAFT, and the best fixed DDTree budget (after the fact), which
stands in for the oracle's best budget (no per-round replay here). s = 0 is the embedded drafter;
the calibrated strength of the task (`strength.STRENGTH_PATH`) is marked on the figure. GRAFT's parts are the
paper regime's at every s (fitted on the real drafter), so the axis moves the drafter alone; the parts fitted on
the calibrated construction are the paper+acceptance regime's.

The tree-gain axis (`gain_records`) holds the chain where the paper's is (the task's `pinned` calibration) and moves
the tree's gain over the chain instead, with one knob g in [0, 2] (`gain_strength`): up to 1, lam = g (what the
drafter knows of the true path past its first miss); past 1, lam = 1 and kappa falls from the calibrated value to
0 (the true token more often the first sibling), s and tau refitted so the chain still accepts the paper's MAT.
Each point's measured gain (DDTree@128 MAT / the chain's) is the x of its figure, beside the paper's gain and the
DDTree paper's range (`graftlib.lab.report.paper`).
"""

import math
from dataclasses import replace
from pathlib import Path

from graftlib.lab.report.claims import CLAIMS, POOLED, evaluate_claims, paper_size
from graftlib.lab.report.metrics import summarize
from graftlib.lab.report.modeled import best_run
from graftlib.lab.report.paper_costs import method_errors
from graftlib.lab.report.regime_tables import Regime
from graftlib.lab.report.tables import grid_text
from graftlib.lab.run.bench import Run
from graftlib.lab.run.regimes import ar_drafted_records, paper, tasks_bench
from graftlib.lab.run.strength import at_kappa, fit_split, fit_temperature, walked_prompts
from graftlib.models.strength import STRENGTH_PATH, Strength, TaskStrengths

POINTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7)


def axis_runs(budgets, budget: int, cap: int) -> list[Run]:
    return [Run("ar", None), Run("dflash", 15), *(Run("ddtree", b) for b in budgets), Run("ddtree+tdes", budget),
            Run("ddtree+saba", cap), Run("graft", cap)]


def shape(task: str, path=STRENGTH_PATH) -> Strength:
    """The task's calibrated construction (`graft calibrate-strength`), whose s and tau the axis moves."""
    return TaskStrengths(path).of(task)


def axis_records(pair, task: str, points, n_prompts: int, max_new_tokens: int, out,
                 base: Regime | None = None) -> dict[float, list[dict]]:
    """{s: records} on `task`'s first `n_prompts` eval prompts, each s with its temperature and the task's calibrated
    lam and kappa (module doc), in the paper regime `base` (its fixed budgets, +TDES's budget and the adaptive cap;
    default `regimes.paper((32, 64, 128, 256, 512))`); the key "baselines" holds EAGLE-3 / OPT-Tree in it
    (`regimes.ar_drafted_records`, beside `out`). Resumable (`run_bench` by setting)."""
    calibrated = shape(task)

    def at(s: float, val) -> Strength:
        moved = replace(calibrated, s=s, tau=1.0)
        return replace(moved, tau=fit_temperature(pair, moved, val)["tau"] if s > 0 else 1.0)

    return _points(pair, task, points, at, n_prompts, max_new_tokens, out, base)


def gain_strength(pair, val, pinned: Strength, g: float, chain_mat: float) -> Strength:
    """The construction at tree-gain knob `g` (module doc) from the task's `pinned` strength: lam = g up to 1, then
    kappa = pinned.kappa * (2 - g) with s and tau refitted so the chain accepts `chain_mat` over `val`
    (`strength.at_kappa`, as the pinned calibration's own kappa fit)."""
    if g <= 1.0:
        return replace(pinned, lam=g)
    return at_kappa(pair, val, pinned.kappa * (2.0 - g), chain_mat)[0]


def gain_records(pair, task: str, points, n_prompts: int, max_new_tokens: int, out,
                 base: Regime | None = None) -> dict[float, list[dict]]:
    """`axis_records` along the tree-gain knob g (module doc) instead of s: {g: records}, the chain held at the
    paper's MAT by the task's `pinned` calibration."""
    from graftlib.lab.report.paper import TABLE1

    pinned = shape(task, "pinned")
    chain_mat = TABLE1["Qwen3-8B"]["DFlash"][task][0]
    return _points(pair, task, points, lambda g, val: gain_strength(pair, val, pinned, g, chain_mat), n_prompts,
                   max_new_tokens, out, base)


def _points(pair, task: str, points, strength_at, n_prompts: int, max_new_tokens: int, out,
            base: Regime | None) -> dict[float, list[dict]]:
    """The axes' one loop: per point x, Tables 1-2's DFlash-drafted runs with the drafter at `strength_at(x, val)`
    (`val`: the task's walked validation prompts), and EAGLE-3 / OPT-Tree once under "baselines"."""
    base = base or paper((32, 64, 128, 256, 512))
    val = walked_prompts(pair, task, fit_split(task, n_prompts), n_prompts, max_new_tokens)
    out_records = {"baselines": ar_drafted_records(pair, base, [task], n_prompts, max_new_tokens, Path(out).parent)}
    for x in points:
        strength = strength_at(x, val)
        regime = replace(base, name="axis", strength={task: strength})
        out_records[x] = tasks_bench(pair, regime, [task], n_prompts, axis_runs(base.budgets, base.budget, base.cap),
                                     max_new_tokens, out)
        print(f"point {x:g} ({strength}): {len(out_records[x])} records")
    return out_records


def axis_table(records: dict, budget: int = 128, cap: int = 512, index: str = "s"):
    """One row per point (strength s, or the tree-gain knob g): MATs, the tree's gain over the chain (DDTree@`budget`
    MAT / the chain's), +SABA's and GRAFT's mean nodes, the best fixed DDTree budget, and each claim's modeled ratio
    and verdict (C1-C9, the paper regime's model errors). A pandas DataFrame indexed by `index`."""
    import pandas as pd

    base = records["baselines"]
    errors = method_errors(paper().profile)  # the paper profile's error per method against the paper's rows
    rows = {}
    for s, recs in records.items():
        if s == "baselines":
            continue
        both = recs + base
        summary = {r["key"]: r for r in summarize(both)}
        ddtree = [k for k in summary if k.startswith("ddtree@")]
        row = {"tau": next((r["setting"].get("tau") for r in recs if "tau" in r.get("setting", {})), None),
               "chain MAT": summary["dflash@15"]["mat"], f"DDTree@{budget} MAT": summary[f"ddtree@{budget}"]["mat"],
               "tree gain": summary[f"ddtree@{budget}"]["mat"] / summary["dflash@15"]["mat"],
               "GRAFT MAT": summary[f"graft@{cap}"]["mat"],
               "+SABA nodes": summary[f"ddtree+saba@{cap}"]["mean_nodes"],
               "GRAFT nodes": summary[f"graft@{cap}"]["mean_nodes"],
               "best fixed budget": int(best_run(both, ddtree, "modeled").partition("@")[2]), "grid": grid_text(ddtree),
               "GRAFT speedup": summary[f"graft@{cap}"]["modeled_speedup"]}
        for c in evaluate_claims(both, budget, cap, errors):
            if c["task"] == POOLED and "ratio modeled" in c:
                ci = c["CI95 modeled"] or (math.nan, math.nan)
                row.update({f"{c['claim']} ratio": c["ratio modeled"], f"{c['claim']} CI95 low": ci[0],
                            f"{c['claim']} CI95 high": ci[1], f"{c['claim']} verdict": c["verdict modeled"]})
        rows[s] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(index)


def paper_sizes(task: str) -> dict[str, float]:
    """Each claim's size in the paper on `task` (`claims.paper_size`)."""
    return {c.id: paper_size(c, [task]) for c in CLAIMS}


def turning_points(T, sizes: dict[str, float], x: str | None = None) -> dict[str, dict]:
    """Per claim, along the axis in `T`'s order: the first point whose modeled ratio is above 1 outside noise (its
    verdict `direction only` or `reproduced`), the first whose 95% interval over prompts reaches the paper's size
    (its high end at or above it, its low end above 1), and the first whose ratio itself does; None where no point
    does. A point is named by `T`'s index, or by its column `x` (the tree-gain axis: the measured gain)."""
    def first(ok):
        return next((T.at[i, x] if x else i for i in T.index if ok(T.loc[i])), None)

    out = {}
    for c, size in sizes.items():
        if f"{c} ratio" not in T:
            continue
        out[c] = {"direction": first(lambda r, c=c: r[f"{c} verdict"] in ("direction only", "reproduced")),
                  "interval reaches size": first(lambda r, c=c, size=size: r[f"{c} CI95 high"] >= size
                                                 and r[f"{c} CI95 low"] > 1.0),
                  "point reaches size": first(lambda r, c=c, size=size: r[f"{c} ratio"] >= size), "paper size": size}
    return out


def axis_summary(T, sizes: dict[str, float], calibrated: float | None, x: str | None = None,
                 name: str = "s") -> str:
    """The figure's finding in words, generated from `T` (`turning_points`): where each claim's ratio leaves noise,
    where its interval and where its point reach the paper's size, the axis read as `name` (`x`: its column)."""
    def at(v):
        return "at no point of this axis" if v is None else f"from {name} = {v:.3g}"

    lines = [f"{c}: above 1 outside noise {at(t['direction'])}; its interval reaches the paper's "
             f"{t['paper size']:.3f}x {at(t['interval reaches size'])}, its ratio {at(t['point reaches size'])}"
             for c, t in turning_points(T, sizes, x).items()]
    if calibrated is not None:
        lines.append(f"the point calibrated to the paper's DFlash chain on this task: {name} = {calibrated:.3f}")
    return "\n".join(lines)
