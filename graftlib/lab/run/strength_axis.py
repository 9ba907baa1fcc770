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
"""

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
from graftlib.lab.run.strength import fit_split, fit_temperature, walked_prompts
from graftlib.models.strength import STRENGTH_PATH, Strength, TaskStrengths

POINTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7)


def axis_runs(budgets, budget: int, cap: int) -> list[Run]:
    return [Run("ar", None), Run("dflash", 15), *(Run("ddtree", b) for b in budgets), Run("ddtree+tdes", budget),
            Run("ddtree+saba", cap), Run("graft", cap)]


def shape(task: str, path=STRENGTH_PATH) -> Strength:
    """The task's calibrated construction (`graft calibrate-strength`), whose s and tau the axis moves."""
    return TaskStrengths(path).of(task)


def axis_records(pair, task: str, points, n_prompts: int, max_new_tokens: int, out, base: Regime | None = None,
                 log=print) -> dict[float, list[dict]]:
    """{s: records} on `task`'s first `n_prompts` eval prompts, each s with its temperature and the task's calibrated
    lam and kappa (module doc), in the paper regime `base` (its fixed budgets, +TDES's budget and the adaptive cap;
    default `regimes.paper((32, 64, 128, 256, 512))`); the key "baselines" holds EAGLE-3 / OPT-Tree in it
    (`regimes.ar_drafted_records`, beside `out`). Resumable (`run_bench` by setting)."""
    base = base or paper((32, 64, 128, 256, 512))
    val = walked_prompts(pair, task, fit_split(task, n_prompts), n_prompts, max_new_tokens)
    out_records = {"baselines": ar_drafted_records(pair, base, [task], n_prompts, max_new_tokens, Path(out).parent)}
    calibrated = shape(task)
    for s in points:
        at = replace(calibrated, s=s, tau=1.0)
        tau = fit_temperature(pair, at, val)["tau"] if s > 0 else 1.0
        regime = replace(base, name="axis", strength={task: replace(at, tau=tau)})
        out_records[s] = tasks_bench(pair, regime, [task], n_prompts, axis_runs(base.budgets, base.budget, base.cap),
                                     max_new_tokens, out)
        log(f"strength {s:g} (tau {tau:.3f}): {len(out_records[s])} records")
    return out_records


def axis_table(records: dict, budget: int = 128, cap: int = 512):
    """One row per strength: MATs, +SABA's and GRAFT's mean nodes, the best fixed DDTree budget, and each claim's
    modeled ratio and verdict (C1-C9, the paper regime's model errors). A pandas DataFrame indexed by s."""
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
               "GRAFT MAT": summary[f"graft@{cap}"]["mat"],
               "+SABA nodes": summary[f"ddtree+saba@{cap}"]["mean_nodes"],
               "GRAFT nodes": summary[f"graft@{cap}"]["mean_nodes"],
               "best fixed budget": int(best_run(both, ddtree, "modeled").partition("@")[2]), "grid": grid_text(ddtree),
               "GRAFT speedup": summary[f"graft@{cap}"]["modeled_speedup"]}
        for c in evaluate_claims(both, budget, cap, errors):
            if c["task"] == POOLED and "ratio modeled" in c:
                row[f"{c['claim']} ratio"] = c["ratio modeled"]
                row[f"{c['claim']} verdict"] = c["verdict modeled"]
        rows[s] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("s")


def paper_sizes(task: str) -> dict[str, float]:
    """Each claim's size in the paper on `task` (`claims.paper_size`)."""
    return {c.id: paper_size(c, [task]) for c in CLAIMS}


def turning_points(T, sizes: dict[str, float]) -> dict[str, dict]:
    """Per claim: the smallest s of the axis whose modeled ratio is above 1 (the direction) and the smallest
    whose ratio reaches the paper's size (None where no point does)."""
    out = {}
    for claim, size in sizes.items():
        col = f"{claim} ratio"
        if col not in T:
            continue
        above = [s for s, r in T[col].items() if r > 1.0]
        sized = [s for s, r in T[col].items() if r >= size]
        out[claim] = {"direction from s": min(above) if above else None, "size from s": min(sized) if sized else None,
                      "paper size": size}
    return out


def axis_summary(T, sizes: dict[str, float], calibrated: float | None) -> str:
    """The figure's finding in words, generated from `T`: where each claim turns and where GRAFT passes OPT-Tree."""
    def at(s):
        return "never on this axis" if s is None else f"from s = {s:g}"

    lines = [f"{c}: above 1 {at(t['direction from s'])}, at the paper's {t['paper size']:.3f}x {at(t['size from s'])}"
             for c, t in turning_points(T, sizes).items()]
    if calibrated is not None:
        lines.append(f"the strength calibrated to the paper's DFlash chain on this task: s = {calibrated:.3f}")
    return "\n".join(lines)
