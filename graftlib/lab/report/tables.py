"""The workbook's Table 1 / Table 2 frames and Figure 1(c)'s curve, wall-clock and modeled side by side.

Table 1 (`table1`): per task, each method at its best budget (chosen after the fact, as DDTree's
own benchmark does), with MAT, wall-clock tokens/s and speedup over AR with its paired bootstrap
95% interval over prompts (`metrics.speedup_ci`), the modeled tokens/s and speedup (the rounds
priced by the cost profile, `graftlib.lab.report.modeled`), a rank and the paper's numbers. Table 2
(`table2`): per task and averaged over the tasks as in the paper, nodes, MAT, tokens/s and the
change against DDTree at the same fixed budget, wall-clock (with the paired interval of the
ratio) and modeled. Both follow the ranking rule (`graftlib.lab.report.modeled`): a method's best budget and the rank
come from the ranking rule (`modeled.order_runs`: wall clock where a pair's interval excludes 1.0, else the
deterministic modeled figure), pooled over the tasks' prompts for the averaged rows (the run
chosen per task relabeled, `modeled.relabeled`). Each returns a `Table`: the frame and a caption
that names the cost profile and the rule, and counts the pairs each figure decided. The modeled
columns of the AR-drafted baselines (EAGLE-3, OPT-Tree) price each round's draft per drafter
forward (the profile's `c_ar_draft`: the context step and one forward per depth, each e0 + e1 rows),
not as DFlash's one block forward (`c_draft`); the caption says so where such a row was run
(`ar_draft_caption`).

Figure 5 (`transfer_table`) and Table 3 (`beta_table`): each scorer's or TDES weight's records as ratios with
their paired 95% intervals over prompts. Figure 1(c) (`budget_curve`): a same-prefix replay's rounds
(`graftlib.training.graft.replay`) split into thirds by what the largest tree accepts, and per third and budget
the tokens per second sum(a) / sum(l), with l the measured round latency and, beside it, the round priced by the
profile.
pandas is imported lazily (the CLI does not need it).
"""

from collections import defaultdict
from dataclasses import dataclass

from graftlib.core.errors import require
from graftlib.inputs.cost_profile import CostProfile, RoundShape
from graftlib.lab.report.metrics import by_task, geomean, summarize
from graftlib.lab.report.modeled import (
    EDGE_NOTE,
    best_run,
    budget_of,
    edge_of,
    order_runs,
    rank,
    relabeled,
    rule_caption,
)
from graftlib.lab.report.paper import DDTREE_QWEN3_8B, TABLE1, TABLE2, TABLE3, tree_gain
from graftlib.methods.registry import AR_LABELS, AR_METHODS, LABELS

TABLE1_METHODS = tuple((m, LABELS[m]) for m in ("ar", "dflash", "ddtree", "graft"))
TABLE2_LABELS = ("DDTree", "+TDES", "+SABA", "GRAFT", "DDTree best fixed", "CaDDTree", "DFlash chain", "AR",
                 *AR_LABELS.values())  # the AR-drafted baselines' context rows, where they ran


@dataclass(frozen=True)
class Table:
    frame: object  # pandas.DataFrame
    caption: str


def method_keys(records: list[dict], method: str) -> list[str]:
    """The run keys of `method` (every budget) in `records`, first seen first."""
    return list(dict.fromkeys(r["key"] for r in records if r["method"] == method))


def ar_draft_caption(records: list[dict]) -> str:
    """The caption's note on how AR-drafted rows are priced ("" if `records` has none)."""
    if not any(r["method"] in AR_METHODS for r in records):
        return ""
    names = "/".join(AR_LABELS[m] for m in AR_METHODS)
    return (f" | {names} m-TPS: each round's draft priced per drafter forward (c_ar_draft: the context step + "
            "one forward per depth, each e0 + e1 x its rows), not as DFlash's one block forward (c_draft)")


def _interval(ci) -> tuple[float, float]:
    return (float("nan"), float("nan")) if ci is None else ci


def table1(records: list[dict], paper: dict, methods=TABLE1_METHODS, not_run: dict[str, str] | None = None) -> Table:
    """Table 1 from bench records of several tasks (module doc); `paper`: method label -> task -> (MAT,
    speedup); `not_run`: method label -> why it has no run here (its row keeps the paper's numbers)."""
    import pandas as pd

    require(len(records) > 0, "Table 1: no bench records")
    rows, orders, shown = [], [], set()
    for task, recs in by_task(records).items():
        summary = {r["key"]: r for r in summarize(recs)}
        searched = {label: keys for m, label in methods if (keys := method_keys(recs, m))}
        chosen = {label: best_run(recs, keys, "rule") for label, keys in searched.items()}
        shown |= set(chosen.values())
        order = order_runs(recs, list(chosen.values()))
        orders.append(order)
        for label, key in chosen.items():
            s = summary[key]
            lo, hi = _interval(s["speedup_ci"])
            p = (1.0, 1.0) if label == "AR" else paper.get(label, {}).get(task, (None, None))
            rows.append({"task": task, "method": label, "run": key, "budget": s["budget"], "MAT": s["mat"],
                         "TPS": s["tokens_per_s"], "speedup": s["speedup"], "speedup lo": lo, "speedup hi": hi,
                         "m-TPS": s["modeled_tokens_per_s"], "m-speedup": s["modeled_speedup"],
                         "rank": order.position(key), "paper MAT": p[0], "paper speedup": p[1],
                         "grid": grid_text(searched[label]), "note": _edge_note(label, searched[label], key)})
        for label, why in (not_run or {}).items():
            p = paper.get(label, {}).get(task, (None, None))
            rows.append({"task": task, "method": label, "run": None, "paper MAT": p[0], "paper speedup": p[1],
                         "note": why})
    note = ar_draft_caption([r for r in records if r["key"] in shown])
    return Table(pd.DataFrame(rows), rule_caption([p for o in orders for p in o.pairs]) + note)


def grid_text(keys: list[str]) -> str:
    """The budgets a best run was chosen from, ascending ("4,8,16"; "" for a single run)."""
    budgets = sorted({b for k in keys if (b := budget_of(k)) is not None})
    return ",".join(map(str, budgets)) if len(budgets) > 1 else ""


def _edge_note(label: str, keys: list[str], best: str) -> str:
    """DDTree's best budget at an edge of the grid searched (`modeled.EDGE_NOTE`), else ""."""
    return EDGE_NOTE if label.startswith("DDTree") and len(keys) > 1 and edge_of(keys, best) else ""


RATIO_CLAIMS = (("C3", "AR"), ("C2", "DFlash"), ("C1", "DDTree"), ("C8", "EAGLE-3"), ("C9", "OPT-Tree"))


def table1_ratios(records: list[dict], claim_rows: list[dict], paper: dict):
    """Table 1 as ratios, GRAFT / X for X = AR, DFlash, DDTree (each at its best), EAGLE-3, OPT-Tree, per task and
    pooled: the TPS ratio under each figure with its 95% interval over prompts (the rows of claims C3, C2, C1,
    C8, C9, `claims.evaluate_claims`; nan where a figure or interval does not exist), the MAT ratio of the runs
    the modeled figure chose (per task), and the paper's two ratios (`paper`: method -> task -> (MAT, speedup),
    Table 1's Qwen3-8B rows; pooled: their geometric mean over the tasks in it). A pandas DataFrame."""
    import pandas as pd

    mats = {t: {s["key"]: s["mat"] for s in summarize(recs)} for t, recs in by_task(records).items()}
    nan = float("nan")

    def paper_ratios(task: str, label: str) -> tuple[float, float]:
        known = [t for t in (mats if task == "all tasks" else [task]) if t in paper["GRAFT"]]
        ref = {t: (1.0, 1.0) if label == "AR" else paper.get(label, {}).get(t) for t in known}
        known = [t for t in known if ref[t]]
        return (geomean([paper["GRAFT"][t][0] / ref[t][0] for t in known]),
                geomean([paper["GRAFT"][t][1] / ref[t][1] for t in known]))

    rows = []
    for claim, label in RATIO_CLAIMS:
        for r in claim_rows:
            if r["claim"] != claim or "ratio modeled" not in r:
                continue
            faster, slower = r["runs modeled"].split(" vs ")
            per_task = mats.get(r["task"], {})
            mat = per_task[faster] / per_task[slower] if faster in per_task and slower in per_task else nan
            p_mat, p_tps = paper_ratios(r["task"], label)
            wall, wall_ci = r.get("ratio wall-clock", nan), r.get("CI95 wall-clock") or (nan, nan)
            rows.append({"task": r["task"], "versus": label, "runs": r["runs modeled"],
                         "TPS ratio": wall, "lo": wall_ci[0], "hi": wall_ci[1],
                         "m-TPS ratio": r["ratio modeled"], "m-lo": (r["CI95 modeled"] or (nan, nan))[0],
                         "m-hi": (r["CI95 modeled"] or (nan, nan))[1], "MAT ratio": mat,
                         "paper TPS ratio": p_tps, "paper MAT ratio": p_mat, "prompts": r["prompts"]})
    return pd.DataFrame(rows)


def table2_runs(records: list[dict], budget: int, cap: int) -> dict[str, str]:
    """Table 2's label -> run key in one task's records (best fixed budgets by the ranking rule)."""
    fixed = {"DDTree": f"ddtree@{budget}", "+TDES": f"ddtree+tdes@{budget}", "+SABA": f"ddtree+saba@{cap}",
             "GRAFT": f"graft@{cap}", "CaDDTree": f"caddtree@{cap}", "AR": "ar"}
    searched = {"DDTree best fixed": "ddtree", "DFlash chain": "dflash", **{v: k for k, v in AR_LABELS.items()}}
    keys = {r["key"] for r in records}
    out = {}
    for label in TABLE2_LABELS:
        if label in fixed:
            if fixed[label] in keys:
                out[label] = fixed[label]
        elif candidates := method_keys(records, searched[label]):
            out[label] = best_run(records, candidates, "rule")
    require("DDTree" in out, f"Table 2 needs the DDTree run ddtree@{budget} (its reference)")
    return out


def _table2_rows(recs: list[dict], runs: dict[str, str]) -> tuple[list[dict], object]:
    """Table 2's rows of one task (or of relabeled records pooled over tasks) and their `Order`. Two labels
    may name one run (DDTree's best fixed budget is often its own): both rows show it, ranked once."""
    summary = {r["key"]: r for r in summarize(recs)}
    base = summary[runs["DDTree"]]
    order = order_runs(recs, list(dict.fromkeys(runs.values())))
    rows = []
    for label, key in runs.items():
        s = summary[key]
        lo, hi = (float("nan"),) * 2 if key == runs["DDTree"] else _interval(rank(recs, runs["DDTree"], key).wall_ci)
        rows.append({"method": label, "run": key, "nodes": s["mean_nodes"], "MAT": s["mat"], "TPS": s["tokens_per_s"],
                     "dTPS %": 100 * (s["tokens_per_s"] / base["tokens_per_s"] - 1),
                     "dTPS lo %": 100 * (lo - 1), "dTPS hi %": 100 * (hi - 1), "m-TPS": s["modeled_tokens_per_s"],
                     "m-dTPS %": 100 * (s["modeled_tokens_per_s"] / base["modeled_tokens_per_s"] - 1),
                     "AR steps %": 100 * s["ar_share"], "rank": order.position(key)})
    return rows, order


def table2(records: list[dict], budget: int, cap: int, paper: dict) -> tuple[Table, Table]:
    """Table 2 (module doc): (averaged over the tasks, per task). The averaged frame's TPS, nodes, MAT
    and their changes are means over the tasks, as in the paper; its interval and rank pool every
    task's prompts. `paper`: label -> (nodes, MAT, TPS, dTPS %)."""
    import pandas as pd

    require(len(records) > 0, "Table 2: no bench records")
    tasks = by_task(records)
    per_task, orders, chosen = [], [], defaultdict(dict)
    for task, recs in tasks.items():
        runs = table2_runs(recs, budget, cap)
        rows, order = _table2_rows(recs, runs)
        grid = method_keys(recs, "ddtree")
        per_task += [dict(r, task=task, grid=grid_text(grid) if r["method"] == "DDTree best fixed" else "",
                          note=_edge_note(r["method"], grid, r["run"]) if r["method"] == "DDTree best fixed" else "")
                     for r in rows]
        orders.append(order)
        for label, key in runs.items():
            chosen[label][task] = key
    labels = [label for label in TABLE2_LABELS if len(chosen[label]) == len(tasks)]
    pooled_rows, pooled_order = _table2_rows([r for label in labels for r in relabeled(records, chosen[label], label)],
                                             {label: label for label in labels})
    pooled = {r["method"]: r for r in pooled_rows}
    P = pd.DataFrame(per_task)
    numeric = ["nodes", "MAT", "TPS", "dTPS %", "m-TPS", "m-dTPS %", "AR steps %"]
    T = P[P.method.isin(labels)].groupby("method", sort=False)[numeric].mean()
    T["dTPS lo %"] = [pooled[m]["dTPS lo %"] for m in T.index]
    T["dTPS hi %"] = [pooled[m]["dTPS hi %"] for m in T.index]
    T["rank"] = [pooled[m]["rank"] for m in T.index]
    for col, i in (("paper nodes", 0), ("paper MAT", 1), ("paper TPS", 2), ("paper dTPS %", 3)):
        T[col] = [paper[m][i] if m in paper else None for m in T.index]
    T["note"] = [EDGE_NOTE if (P[P.method == m].note == EDGE_NOTE).any() else "" for m in T.index]
    note = ar_draft_caption([r for r in records if r["key"] in {k for runs in chosen.values() for k in runs.values()}])
    averaged = ("averaged over tasks; dTPS lo/hi %: paired bootstrap 95% interval of TPS / DDTree's over every task's "
                "prompts; rank pooled over them | " + rule_caption(pooled_order.pairs) + note)
    return Table(T, averaged), Table(P[["task", *P.columns.drop("task")]],
                                     rule_caption([p for o in orders for p in o.pairs]) + note)


def budget_curve(replay_records: list, grid: list[int], profile: CostProfile, prompt_of: dict | None = None):
    """Figure 1(c)'s curves (module doc): index (group, B), columns a, l, m_l, tps, m_tps. With `prompt_of` (round
    -> prompt, `replay.round_prompts`) the same sums per prompt ride along as `curve.attrs["by_prompt"]`
    ({(group, B): {prompt: (a, l, m_l)}}), which `best_gap` bootstraps."""
    import pandas as pd

    R = pd.DataFrame([dict(round=r.round, B=r.budget, a=r.accepted, l=r.latency,
                           m_l=profile.round_s(RoundShape.of(r))) for r in replay_records if not r.reference])
    require(len(R) > 0 and max(grid) in set(R.B), f"no replayed rounds at the grid's largest budget {max(grid)}")
    hard_easy = R[R.B == max(grid)].set_index("round").a
    R["group"] = R["round"].map(pd.qcut(hard_easy.rank(method="first"), 3, labels=["hard", "medium", "easy"]))
    curve = R.groupby(["group", "B"], observed=True).agg(a=("a", "sum"), l=("l", "sum"), m_l=("m_l", "sum"),
                                                        rounds=("round", "nunique"))
    curve["tps"] = curve.a / curve.l
    curve["m_tps"] = curve.a / curve.m_l
    if prompt_of is not None:  # plain dicts and tuples: pandas compares attrs when it concatenates curves
        R["prompt"] = R["round"].map(prompt_of)
        sums = R.groupby(["group", "B", "prompt"], observed=True)[["a", "l", "m_l"]].sum()
        by_prompt: dict = {}
        for (group, b, prompt), row in sums.iterrows():
            by_prompt.setdefault((str(group), int(b)), {})[int(prompt)] = (float(row.a), float(row.l), float(row.m_l))
        curve.attrs["by_prompt"] = by_prompt
    return curve


def best_gap(curve, group: str, own: int, other: int, column: str = "tps", resamples: int = 2000, seed: int = 0):
    """How far `group`'s throughput at its own best budget `own` exceeds its throughput at `other` (another
    group's best): TPS(own) / TPS(other) with the 95% percentile bootstrap interval over prompts (each prompt's
    rounds of the group resampled together; `column` "tps" measured, "m_tps" modeled). (ratio, interval or None
    where the curve has no per-prompt sums or fewer than 3 prompts)."""
    import numpy as np

    ratio = curve.at[(group, own), column] / curve.at[(group, other), column]
    by = curve.attrs.get("by_prompt")
    if by is None:
        return ratio, None
    at_own, at_other = by.get((group, own), {}), by.get((group, other), {})
    prompts = sorted(set(at_own) | set(at_other))
    if len(prompts) < 3:
        return ratio, None
    k = 1 if column == "tps" else 2  # the time of the sums: measured or modeled
    own_s = np.array([[at_own.get(p, (0.0, 0.0, 0.0))[i] for i in (0, k)] for p in prompts])
    other_s = np.array([[at_other.get(p, (0.0, 0.0, 0.0))[i] for i in (0, k)] for p in prompts])
    idx = np.random.default_rng(seed).integers(0, len(prompts), size=(resamples, len(prompts)))
    ratios = (own_s[idx, 0].sum(1) / own_s[idx, 1].sum(1)) / (other_s[idx, 0].sum(1) / other_s[idx, 1].sum(1))
    return ratio, (float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5)))


def mismatch_reduction(rate: float, base: float) -> float:
    """The mismatch reduction against `base` in percent; nan where the base has no mismatch to reduce."""
    return 100 * (1 - rate / base) if base else float("nan")


def _paired(records: list[dict], method: str, baseline: str) -> dict:
    """`summarize`'s row of `method` against `baseline` (both method names of `records`, one run each): its
    ratios to the baseline and their paired bootstrap intervals over prompts."""
    keyed = [dict(r, key=r["method"]) for r in records if r["method"] in (method, baseline)]
    rows = {row["key"]: row for row in summarize(keyed, baseline=baseline)}
    require(method in rows and baseline in rows, f"no {method} or no {baseline} records to compare")
    return rows


RATIOS = {"modeled TPS": ("modeled_speedup", "modeled_speedup_ci"), "TPS": ("speedup", "speedup_ci")}


def _ratio_columns(row: dict, over: str, walk: bool) -> dict:
    """A `summarize` row's TPS over `over`'s, modeled (and measured unless `walk`), each with its interval's ends."""
    out = {}
    for tps, (ratio, ci) in RATIOS.items():
        if walk and tps == "TPS":
            continue
        low, high = row[ci] or (float("nan"), float("nan"))
        out.update({f"{tps} / {over}": row[ratio], f"{tps} / {over} CI95 low": low,
                    f"{tps} / {over} CI95 high": high})
    return out


def transfer_table(records: dict[str, list[dict]], walk: bool):
    """Figure 5 from each TDES scorer's records (scorer name -> DDTree and +TDES at one budget, any tasks): per
    task and scorer +TDES's mismatch reduction against DDTree and its TPS / DDTree, modeled (and measured unless
    `walk`), each ratio with its paired 95% bootstrap interval over prompts (`summarize` against DDTree; columns
    "... CI95 low" / "high"). A pandas DataFrame indexed by task with (figure, scorer) columns."""
    import pandas as pd

    frames = {}
    for scorer, recs in records.items():
        rows = {}
        for task, task_recs in by_task(recs).items():
            s = _paired(task_recs, "ddtree+tdes", "ddtree")
            td = s["ddtree+tdes"]
            rows[task] = {"mismatch reduction %": mismatch_reduction(td["mismatch_rate"], s["ddtree"]["mismatch_rate"]),
                          **_ratio_columns(td, "DDTree", walk)}
        frames[scorer] = pd.DataFrame.from_dict(rows, orient="index")
    F = pd.concat(frames, axis=1).swaplevel(axis=1)  # columns (figure, scorer), figures in their rows' order
    figures = dict.fromkeys(c for frame in frames.values() for c in frame.columns)
    return F[[(figure, scorer) for figure in figures for scorer in frames]].rename_axis("task")


BETA_REFERENCES = (0.0, 0.2)  # T3's comparisons: every beta against beta = 0 (direction) and 0.2 (the paper's)


def beta_table(records: dict[float, list[dict]], walk: bool):
    """Table 3 from each TDES weight's records (beta -> AR and GRAFT at one cap, one task; beta = 0: DDTree's
    edge scores with SABA): MAT, nodes, modeled TPS and speedup (measured too unless `walk`), the mismatch rate
    and its reduction against beta = 0, each beta's TPS over beta = 0's and over beta = 0.2's (where run) with
    paired 95% bootstrap intervals over prompts, beside the paper's row. A pandas DataFrame indexed by beta."""
    import pandas as pd

    graft = {b: [dict(r, method=f"beta {b:g}") for r in recs if r["method"] == "graft"] for b, recs in records.items()}
    rows = {}
    for beta, recs in records.items():
        s = next(row for row in summarize(recs) if row["method"] == "graft")
        rows[beta] = {"MAT": s["mat"], "nodes/round": s["mean_nodes"], "modeled TPS": s["modeled_tokens_per_s"],
                      "speedup modeled": s["modeled_speedup"], "mismatch": s["mismatch_rate"],
                      **({} if walk else {"TPS": s["tokens_per_s"], "speedup wall": s["speedup"]}),
                      "ties": s["ties"], "mismatches": s["mismatches"]}
        for ref in (b for b in BETA_REFERENCES if b in graft):
            name, over = f"beta {beta:g}", f"beta {ref:g}"
            pooled = graft[ref] + ([] if beta == ref else graft[beta])  # beta against itself: 1 exactly
            rows[beta].update(_ratio_columns(_paired(pooled, name, over)[name], over, walk))
    T = pd.DataFrame.from_dict(rows, orient="index").rename_axis("beta")
    base = T["mismatch"].get(0.0, float("nan"))
    T["mismatch reduction %"] = 100 * (1 - T["mismatch"] / base) if base else float("nan")
    for i, name in enumerate(("paper MAT", "paper TPS", "paper reduction %")):
        T[name] = [TABLE3.get(b, (None,) * 3)[i] for b in T.index]
    return T


def construction_checks(records: list[dict], components, betas, curve, oracle: dict, budget: int = 128):
    """What a drafter-strength calibration was not fitted on, beside the paper's (docs/strength.md): Table 2's
    +TDES / +SABA / GRAFT MAT and nodes a round (`components`: `regime_tables.regime_components`; the paper's are its
    nine-dataset means), Table 3's mismatch reduction at beta = 0.2 (`betas`: `beta_table`), the best budgets of the
    easy and hard thirds (`curve`: `budget_curve`, modeled) and Figure 6's best fixed budget (`oracle`:
    `regime_tables.against_fixed`), and per task the tree's gain over the chain (DDTree@`budget`'s MAT / the chain's,
    from `records`) beside the GRAFT paper's and the DDTree paper's. A pandas DataFrame: check, ours, paper."""
    import pandas as pd

    rows = []
    for label in ("+TDES", "+SABA", "GRAFT"):
        if label in components.index:
            rows += [{"check": f"Table 2 {label} MAT", "ours": components.at[label, "MAT"],
                      "paper": TABLE2[label][1]},
                     {"check": f"Table 2 {label} nodes a round", "ours": components.at[label, "nodes/round"],
                      "paper": TABLE2[label][0]}]
    if 0.2 in betas.index:
        rows.append({"check": "Table 3 mismatch reduction % at beta 0.2",
                     "ours": betas.at[0.2, "mismatch reduction %"], "paper": TABLE3[0.2][2]})
    best = curve["m_tps"].groupby(level=0, observed=True).idxmax().map(lambda x: x[1])
    rows += [{"check": f"Figure 1(c) best budget, {g} third", "ours": best.get(g), "paper": None}
             for g in ("easy", "hard")]
    rows.append({"check": "Figure 6 best fixed budget", "ours": oracle["best_fixed_budget"], "paper": None})
    for task, recs in by_task(records).items():
        mats = {s["key"]: s["mat"] for s in summarize(recs)}
        if {f"ddtree@{budget}", "dflash@15"} <= set(mats) and task in DDTREE_QWEN3_8B and task in TABLE1["Qwen3-8B"][
                "GRAFT"]:
            chain, tree = DDTREE_QWEN3_8B[task]
            rows.append({"check": f"tree / chain MAT, {task} (paper: GRAFT's Table 1; DDTree paper {tree / chain:.2f})",
                         "ours": mats[f"ddtree@{budget}"] / mats["dflash@15"], "paper": tree_gain(task)})
    return pd.DataFrame(rows)
