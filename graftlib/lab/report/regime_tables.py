"""The cost regimes as data, and the paper's items computed from a regime's records.

A `Regime` is what decides and prices a decode's rounds (module `graftlib.lab.run.regimes` builds
them and runs their sweeps): this machine's costs, the paper's A100 costs, or the paper's costs and
acceptance (the drafter-strength construction). From a regime's records, with no decoding:
`regime_table` (Tables 1-2 beside the paper's GSM8K numbers), `regime_components` (Table 2 pooled
over tasks), `mismatch_table` (Figure 1(b)), `needed_mat_line` (the MAT GRAFT would need for the
paper's speedup), `regime_claims` / `claims_by_regime` (C1-C9, `graftlib.lab.report.claims`, a verdict
per regime and figure), `against_fixed` (Figure 6: SABA against the
best fixed budget) and `figure_claims` (F1b, F1c, F5, F6, F6b, T3 in the same vocabulary). Every ratio
a verdict reads has its paired bootstrap interval over prompts beside it (`metrics.summarize`); Figure 5's and
Table 3's frames (`transfer_table`, `beta_table`) are `graftlib.lab.report.tables`'.
"""

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from graftlib.core.errors import require
from graftlib.inputs.cost_profile import CostProfile
from graftlib.lab.report.claims import (
    CLAIMS,
    MIN_PROMPTS,
    POOLED,
    count_text,
    counts_text,
    evaluate_claims,
    sized_verdict,
    verdict_cell,
)
from graftlib.lab.report.metrics import by_task, ratio_ci, summarize
from graftlib.lab.report.modeled import EDGE, at_edge
from graftlib.lab.report.paper import FIGURE6, TABLE1, TABLE2
from graftlib.lab.report.paper_costs import MODEL, PROFILE_NAME, mat_needed, method_errors
from graftlib.lab.report.tables import BETA_REFERENCES, best_gap, mismatch_reduction
from graftlib.methods.registry import LABELS
from graftlib.methods.saba_params import SabaParams


@dataclass(frozen=True)
class Regime:
    name: str  # "machine" | "paper"
    label: str  # what a figure says of its numbers
    profile: CostProfile
    saba: SabaParams | None  # the adaptive methods' calibration, deciding under `profile` (None: the shipped one)
    budgets: tuple[int, ...]  # DDTree's fixed budgets
    budget: int  # the fixed budget of Table 2's DDTree and +TDES rows, Figure 1(b)'s and Figure 5's
    cap: int  # +SABA, GRAFT and CaDDTree choose up to this
    chains: tuple[int, ...]  # the DFlash chain's drafts per round
    walk: bool  # DFlash-drafted runs walked (modeled only), not verified
    strength: dict | None = None  # task -> (s, tau) of the drafter-strength construction (None: the real drafter)
    # {"default": path, task: path}: TDES scorers fitted for this regime's drafter (None: as given)
    tdes: dict | None = None

    def scorer(self, path: str | None = None, task: str | None = None) -> str | None:
        """The TDES scorer a run of this regime uses: the regime's own (`task`: the one trained on that task's
        traces only) where it has them, fitted for its drafter; else `path` (None: the shipped default)."""
        if self.tdes is None:
            return path
        key = task or "default"
        require(key in self.tdes, f"the {self.name} regime has no TDES scorer {key!r} (it has {', '.join(self.tdes)})")
        return self.tdes[key]

    def pair_for(self, pair, task: str):
        """`pair` as this regime drafts `task` with: at the task's calibrated strength where the regime has one."""
        if self.strength is None:
            return pair
        require(task in self.strength, f"the {self.name} regime has no calibrated drafter strength for {task!r} "
                f"(calibrated: {', '.join(self.strength)}): run `graft calibrate-strength --tasks {task}`")
        return pair.with_strength(self.strength[task])

    @property
    def suffix(self) -> str:
        """The regime's part of a figure's file name: "" on this machine, "_paper", "_paper_acceptance"."""
        return "" if self.name == "machine" else "_" + self.name.replace("+", "_")

    @property
    def turns(self) -> str:
        """The prompts' turns: a walked decode takes one (`bench.decode_prompt`), a verified one all."""
        return "1" if self.walk else "all"


def mismatch_table(records: list[dict], regime: Regime):
    """Figure 1(b) in `regime`: per task the parent-child mismatch rate (`core.tree.parent_mismatch`, over the
    rounds that could continue) of DDTree and +TDES at the regime's fixed budget and of GRAFT at its cap, and
    TDES's and GRAFT's reduction against DDTree in percent. A pandas DataFrame indexed by task."""
    import pandas as pd

    keys = {"DDTree": f"ddtree@{regime.budget}", "+TDES": f"ddtree+tdes@{regime.budget}",
            "GRAFT": f"graft@{regime.cap}"}
    rows = {}
    for task, recs in by_task(records).items():
        rate = {s["key"]: s["mismatch_rate"] for s in summarize(recs)}
        row = {label: rate.get(key, float("nan")) for label, key in keys.items()}
        for label in ("+TDES", "GRAFT"):
            row[f"{label} reduction %"] = mismatch_reduction(row[label], row["DDTree"])
        rows[task] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("task")


def regime_table(records: list[dict], regime: Regime, task: str = "gsm8k"):
    """Per run: nodes per round, MAT, the modeled speedup over AR (and, in a regime that verifies, the wall-clock one),
    beside the paper's Table 1 row on `task` (Qwen3-8B) and Table 2's mean nodes. A pandas DataFrame."""
    import pandas as pd

    rows = []
    for s in summarize(by_task(records).get(task, [])):
        label = LABELS[s["method"]]
        paper_t1 = TABLE1[MODEL].get(label, {}).get(task)
        rows.append({"regime": regime.name, "run": s["key"], "method": label, "nodes/round": s["mean_nodes"],
                     "MAT": s["mat"], "speedup modeled": s["modeled_speedup"],
                     "speedup wall": None if regime.walk else s["speedup"],  # a walked regime is modeled only
                     "paper MAT": paper_t1[0] if paper_t1 else None,
                     "paper speedup": paper_t1[1] if paper_t1 else None,
                     "paper nodes": TABLE2[label][0] if label in TABLE2 else None})
    return pd.DataFrame(rows).set_index("run")


def regime_components(records: list[dict], regime: Regime):
    """Table 2 in `regime`, pooled over the records' tasks as the paper averages over its datasets: DDTree and
    +TDES at the fixed budget, +SABA, GRAFT and CaDDTree at the cap, with nodes per round, MAT, the share of
    rounds run as plain AR steps (SABA's AR gate), modeled TPS and
    its change against DDTree (wall clock too where the regime verifies), beside the paper's Table 2. A pandas
    DataFrame indexed by the paper's labels."""
    import pandas as pd

    keys = {"DDTree": f"ddtree@{regime.budget}", "+TDES": f"ddtree+tdes@{regime.budget}",
            "+SABA": f"ddtree+saba@{regime.cap}", "GRAFT": f"graft@{regime.cap}", "CaDDTree": f"caddtree@{regime.cap}"}
    s = {row["key"]: row for row in summarize(records)}
    base = s.get(keys["DDTree"])
    require(base is not None, f"Table 2 in the {regime.name} regime: no {keys['DDTree']} records")
    rows = {}
    for label, key in keys.items():
        if key not in s:
            continue
        r, paper_row = s[key], TABLE2.get(label)
        rows[label] = {"run": key, "nodes/round": r["mean_nodes"], "MAT": r["mat"],
                       "modeled TPS": r["modeled_tokens_per_s"],
                       "m-dTPS %": 100 * (r["modeled_tokens_per_s"] / base["modeled_tokens_per_s"] - 1),
                       **({} if regime.walk else {"dTPS %": 100 * (r["tokens_per_s"] / base["tokens_per_s"] - 1)}),
                       "AR steps %": 100 * r["ar_share"],
                       "paper nodes": paper_row[0] if paper_row else None,
                       "paper MAT": paper_row[1] if paper_row else None,
                       "paper dTPS %": paper_row[3] if paper_row else None}
    return pd.DataFrame.from_dict(rows, orient="index")


def needed_mat_line(records: list[dict], regime: Regime, task: str = "gsm8k") -> str:
    """One line: the MAT GRAFT would need for the paper's speedup on `task` under `regime`'s costs at its
    own mean nodes per round, beside the MAT it has."""
    if task not in TABLE1[MODEL]["GRAFT"]:
        return f"the paper's Table 1 has no {task} row: no MAT needed computed"
    row = next((s for s in summarize(by_task(records).get(task, [])) if s["method"] == "graft"), None)
    if row is None:
        return "no GRAFT run: no MAT needed computed"
    target = TABLE1[MODEL]["GRAFT"][task][1]
    need = mat_needed(regime.profile, target, row["mean_nodes"])
    return (f"GRAFT under {regime.profile.name} at its {row['mean_nodes']:.1f} nodes a round needs MAT {need:.2f} for "
            f"the paper's {target:.2f}x on {task} (the paper's MAT {TABLE1[MODEL]['GRAFT'][task][0]:.2f}); "
            f"the embedded pair has {row['mat']:.2f} ({row['modeled_speedup']:.2f}x modeled)")


def regime_claims(records: list[dict], regime: Regime) -> list[dict]:
    """C1-C9 per task and pooled (`claims.evaluate_claims`) on one regime's records, at its Table 2 budget and cap;
    a walked regime priced by the paper's profile takes that fit's per-method errors (`paper_costs.method_errors`)."""
    errors = method_errors(regime.profile) if regime.walk and regime.profile.name == PROFILE_NAME else None
    return evaluate_claims(records, regime.budget, regime.cap, errors)


def claims_by_regime(records: dict[str, list[dict]], regimes: dict[str, Regime]):
    """C1-C9 pooled over the tasks, one verdict column per regime and figure (the machine's by wall clock and
    modeled, a walked regime's modeled only), each cell the verdict with its ratio, interval and the paper's
    size (`claims.verdict_cell`), and a counts column per regime. A walked regime's model error is its
    profile's against the paper's rows where it is the paper's profile (`paper_costs.method_errors`). A pandas
    DataFrame indexed by claim."""
    return claims_table({name: regime_claims(recs, regimes[name]) for name, recs in records.items()}, regimes)


def claims_table(rows: dict[str, list[dict]], regimes: dict[str, Regime]):
    """`claims_by_regime`'s table from each regime's claim rows (`regime_claims`) already computed."""
    import pandas as pd

    table = {c.id: {"source": c.source, "paper": c.paper} for c in CLAIMS}
    for name, regime_rows in rows.items():
        regime = regimes[name]
        for r in (r for r in regime_rows if r["task"] == POOLED):
            for figure in _figures(regime):
                table[r["claim"]][f"{name} {figure}"] = verdict_cell(r, figure)
            table[r["claim"]][f"{name} counts"] = counts_text(r)
    return pd.DataFrame.from_dict(table, orient="index")


def budget_set(grid) -> str:
    """A budget set named by what it is: "B in {0 (AR step), 2, ..., 32}" (its ends and count beside the paper's
    Figure 6 set, which it is only where equal)."""
    g = sorted(grid)
    inner = ", ".join(("0 (AR step)" if b == 0 else str(b)) for b in g)
    own = " (the paper's set)" if tuple(g) == tuple(FIGURE6["budgets"]) else ""
    return f"B in {{{inner}}}{own}"


def robust_column(C, names: list[str], label: str = "paper+acceptance robust"):
    """`C` (a claims table, `claims_by_regime` / `figure_claims`) with a column `label` across the regimes `names`
    (one per drafter-strength calibration, their modeled figure): the verdict word where every one of them gives
    the same, else "depends on the drafter's tree gain (<regime>: <verdict>; ...)"; None where a claim lacks one
    of the cells. Returns a new table."""
    cols = [f"{n} modeled" for n in names]
    require(all(c in C.columns for c in cols), f"the robust column needs the columns {', '.join(cols)}")

    def word(cell) -> str | None:
        return cell.split(" (")[0] if isinstance(cell, str) else None

    def robust(row) -> str | None:
        words = [word(row[c]) for c in cols]
        if any(w is None for w in words):
            return None
        if len(set(words)) == 1:
            return words[0]
        return "depends on the drafter's tree gain (" + "; ".join(f"{n}: {w}" for n, w in zip(names, words,
                                                                                          strict=True)) + ")"

    return C.assign(**{label: C.apply(robust, axis=1)})


def against_fixed(rows: list[dict]) -> dict:
    """Figure 6's rows (`regime_oracle`) against one budget every round: SABA's mean retained oracle
    throughput, the best fixed budget's chosen after the fact (and its mean), SABA / best fixed pooled over
    rounds with its bootstrap interval over prompts (rows without `prompt` count as one prompt), the runner-up
    fixed budget with best / runner-up and its interval (is the best a best beyond noise?), and the prompts."""
    budgets = sorted(set.intersection(*(set(r["fixed"]) for r in rows))) if rows else []
    require(budgets, "Figure 6: no budget was replayed in every round")
    fixed = {b: sum(r["fixed"][b] for r in rows) / len(rows) for b in budgets}
    best = max(fixed, key=fixed.get)
    runner_up = max((b for b in budgets if b != best), key=fixed.get, default=None)
    per_prompt = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        p = per_prompt[r.get("prompt", 0)]
        p[0] += r["retained"]
        p[1] += r["fixed"][best]
        p[2] += r["fixed"][runner_up] if runner_up is not None else 0.0
    saba = sum(r["retained"] for r in rows) / len(rows)
    num, den, second = zip(*per_prompt.values())
    rounds = Counter(r.get("prompt", 0) for r in rows)
    return {"saba": saba, "saba_ci": ratio_ci(list(num), [rounds[p] for p in per_prompt]),
            "best_fixed_budget": best, "best_fixed": fixed[best], "fixed": fixed,
            "ratio": saba / fixed[best], "ci": ratio_ci(list(num), list(den)), "prompts": len(per_prompt),
            "runner_up": runner_up,
            "best_over_runner_up": fixed[best] / fixed[runner_up] if runner_up is not None else math.nan,
            "best_over_runner_up_ci": ratio_ci(list(den), list(second)) if runner_up is not None else None}


FIGURE_CLAIMS = {
    "F1b": ("Figure 1(b)", ("GRAFT consistently reduces the parent-child mismatch rate over DDTree across tasks "
                            "(the system: GRAFT at SABA's budgets against DDTree at its fixed one)")),
    "F1b-m": ("Figure 1(b)", ("TDES's edge scores reduce the mismatch at DDTree's own budget across tasks (the "
                              "mechanism: +TDES against DDTree, equal trees)")),
    "F1c": ("Figure 1(c)", "the throughput-optimal budget differs between easy and hard rounds"),
    "F5": ("Figure 5", "a TDES scorer trained on GSM8K only reduces mismatch and raises TPS / DDTree on every task"),
    "F6": ("Figure 6", f"SABA retains {FIGURE6['mean_retained']:.1%} of the same-prefix oracle's throughput"),
    "F6b": ("Figure 6", "SABA's per-round budgets beat the best fixed budget (chosen after the fact)"),
    "T3": ("Table 3", "beta = 0.2 gives the highest TPS of beta in {0, 0.05, 0.1, 0.2, 0.4}"),
}
VERDICT_RULES = {  # one rule per item, read from the claim's own words: a ratio, an ordering or a level
    "F1b": "ordering per task: reproduced where GRAFT's mismatch rate is below DDTree's on every task, opposite where "
           "above on every task, else inside noise (mismatch pooled over rounds: no interval)",
    "F1b-m": "ordering per task: reproduced where +TDES's mismatch rate at DDTree's budget is below DDTree's on every "
             "task, opposite where above on every task, else inside noise (pooled over rounds: no interval)",
    "F1c": "ordering: the easy and hard thirds' best budgets differ only where each third's TPS at its own best "
           "exceeds its TPS at the other's best outside the 95% interval over prompts; then reproduced where the easy "
           "third's is above the hard third's, opposite where below; else (equal, or either gap inside its interval) "
           "inside noise; a best at its grid's edge: not tested",
    "F5": "both parts on every task the scorer never saw (GSM8K left out): reproduced where TPS / DDTree is above 1 "
          "outside its 95% interval over prompts and the mismatch falls on every task; opposite where TPS is below 1 "
          "on every task or the mismatch falls on none; else inside noise",
    "F6": "level: reproduced where SABA's mean retained share, with its 95% interval over prompts, reaches the "
          "paper's number; direction only where below it. Where SABA decides with the cost model that prices the "
          "oracle, it tests SABA's gain prediction only",
    "F6b": "ordering: reproduced where SABA / best fixed budget is above 1 outside its 95% interval over prompts, "
           "opposite where below, else inside noise; a best fixed budget at its grid's edge: not tested; the best "
           "against the runner-up fixed budget, with its interval, beside it",
    "T3": "ordering: reproduced where beta = 0.2's TPS is above the runner-up's outside the 95% interval over "
          "prompts, opposite where another beta's is above 0.2's outside it, else inside noise",
}
GSM8K_SCORER = "gsm8k-only"  # Figure 5's scorer name for the one trained on GSM8K traces only


def _figures(regime: Regime) -> tuple[str, ...]:
    return ("modeled",) if regime.walk else ("wall-clock", "modeled")


def _level_cell(value: float, ci, paper: float, prompts: int, min_prompts: int) -> str:
    """A level claim (F6: "SABA retains 94.1% of the oracle"), by its rule (`VERDICT_RULES`): reproduced where the
    interval over prompts reaches the paper's number, direction only where it lies below it."""
    if prompts < min_prompts or ci is None:
        return f"not tested ({value:.1%} vs the paper's {paper:.1%}, {prompts} prompts)"
    v = "reproduced" if ci[1] >= paper else "direction only"
    return f"{v} ({value:.1%} [{ci[0]:.1%}, {ci[1]:.1%}] vs the paper's {paper:.1%})"


def _qualitative(ok: bool, opposite: bool, tested: bool) -> str:
    """A claim without an interval: reproduced where every unit agrees, opposite where every one disagrees."""
    return "not tested" if not tested else "reproduced" if ok else "opposite" if opposite else "inside noise"


def _interval(T, row, column: str, invert: bool = False) -> tuple[float, tuple[float, float] | None]:
    """A ratio column of a table and its interval (None where it has none); `invert`: the other way round."""
    ratio, low, high = (T.at[row, c] for c in (column, f"{column} CI95 low", f"{column} CI95 high"))
    ci = None if math.isnan(low) or math.isnan(high) else (low, high)  # nan: fewer than 3 paired prompts
    if invert:
        return 1 / ratio, ci and (1 / ci[1], 1 / ci[0])
    return ratio, ci


def _ratio_text(ratio: float, ci) -> str:
    return f"{ratio:.3f}x" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _transfer_cell(F, figure: str, prompts: int, min_prompts: int) -> str:
    """F5 in words (both parts of the claim, `VERDICT_RULES`): per task the GSM8K-only scorer's TPS / DDTree with its
    paired 95% bootstrap interval over prompts (`transfer_table`) and its mismatch reduction; reproduced where TPS
    is above 1 outside noise and the mismatch falls on every task, opposite where TPS is below 1 outside noise on
    every task or the mismatch falls on none, else inside noise."""
    F = F.drop(index="gsm8k", errors="ignore")  # the GSM8K-only scorer's own task: never a test of transfer
    if F.empty:
        return "not tested (no task besides GSM8K)"
    column = "TPS / DDTree" if figure == "wall-clock" else "modeled TPS / DDTree"
    F = F.xs(GSM8K_SCORER, axis=1, level=1)
    verdicts, cells = [], []
    for task in F.index:
        ratio, ci = _interval(F, task, column)
        verdicts.append(sized_verdict(ratio, ci, 1.0, prompts, min_prompts=min_prompts))
        cells.append(f"{task} {_ratio_text(ratio, ci)}")
    falls = F["mismatch reduction %"] > 0
    if "not tested" in verdicts:
        v = "not tested"
    elif all(x == "reproduced" for x in verdicts) and falls.all():
        v = "reproduced"
    elif all(x == "opposite" for x in verdicts) or not falls.any():
        v = "opposite"
    else:
        v = "inside noise"
    mismatch = "; ".join(f"{task} {F.at[task, 'mismatch reduction %']:+.0f}%" for task in F.index)
    return f"{v} (TPS / DDTree {'; '.join(cells)}; mismatch reduction {mismatch})"


def _runner_up_text(f: dict) -> str:
    """Figure 6's best fixed budget against the runner-up (`against_fixed`): is the best a best beyond noise?"""
    if f["runner_up"] is None:
        return ""
    ci = f["best_over_runner_up_ci"]
    apart = ci is not None and ci[0] > 1.0
    return (f"; B={f['best_fixed_budget']} over the runner-up B={f['runner_up']}: "
            f"{_ratio_text(f['best_over_runner_up'], ci)}, {'apart' if apart else 'inside noise'}")


def _best_budgets_cell(curve, column: str, easy: int, hard: int, edge: bool, tested: bool) -> str:
    """F1c in words, by its rule (`VERDICT_RULES`): each third's TPS at its own best over its TPS at the other's best,
    with the interval over prompts (`tables.best_gap`); the bests differ only where both gaps are outside noise."""
    if easy == hard:
        return f"{EDGE if edge else 'inside noise' if tested else 'not tested'} (easy and hard B={easy})"
    gaps = {g: best_gap(curve, g, own, other, column) for g, own, other in (("easy", easy, hard), ("hard", hard, easy))}
    text = "; ".join(f"{g} at B={own} / at B={other}: {_ratio_text(*gaps[g])}"
                     for g, own, other in (("easy", easy, hard), ("hard", hard, easy)))
    apart = all(ci is not None and ci[0] > 1.0 for _, ci in gaps.values())
    if edge or not tested:
        v = EDGE if edge else "not tested"
    elif any(ci is None for _, ci in gaps.values()):
        v = "not tested"
    else:
        v = ("reproduced" if easy > hard else "opposite") if apart else "inside noise"
    return f"{v} (easy B={easy}, hard B={hard}; {text})"


def _beta_cell(T, tps: str, prompts: int, min_prompts: int) -> str:
    """T3 in words, by its ordering rule (`VERDICT_RULES`): beta = 0.2 against the best other beta, the TPS ratio with
    its paired 95% bootstrap interval over prompts (`beta_table`'s columns; `tps` "TPS" or "modeled TPS"):
    reproduced where 0.2 is best outside noise of the runner-up, opposite where another beta beats it outside
    noise, else inside noise; with the best beta against beta = 0 beside it."""
    def versus(x: float, y: float) -> tuple[str, str]:  # TPS_x / TPS_y, y or x one of BETA_REFERENCES
        if y in BETA_REFERENCES:
            ratio, ci = _interval(T, x, f"{tps} / beta {y:g}")
        else:
            ratio, ci = _interval(T, y, f"{tps} / beta {x:g}", invert=True)
        return sized_verdict(ratio, ci, 1.0, prompts, min_prompts=min_prompts), _ratio_text(ratio, ci)

    if 0.2 not in T.index:
        return "not tested (beta = 0.2 not run)"
    best = T[tps].idxmax()
    other = T[tps].drop(0.2).idxmax()  # the runner-up where 0.2 is best, else the best
    v, text = versus(0.2, other)
    if v == "not tested":
        return f"not tested (beta 0.2: {text} over beta {other:g})"
    v = {"reproduced": "reproduced", "opposite": "opposite"}.get(v, "inside noise")
    zero = "" if best == 0 else f"; best beta {best:g}: {versus(best, 0.0)[1]} over beta 0"
    return f"{v} (beta 0.2: {text} over beta {other:g}{zero})"


def figure_claims(regimes: dict[str, Regime], curves: dict | None = None, oracles: dict | None = None,
                  mismatch: dict | None = None, transfer: dict | None = None, betas: dict | None = None,
                  n_prompts: int = 0, max_new_tokens: int = 0):
    """The paper's figure and Table 3 claims (`FIGURE_CLAIMS`) per regime and figure, as rows shaped like
    `claims_by_regime`'s (verdicts of `graftlib.lab.report.claims`, `not tested` under `MIN_PROMPTS` prompts a task;
    `VERDICT_RULES` is each one's rule); each argument is {regime name: that item's table} and an item left
    out (None) is left out of the rows:
      F1b  `mismatch` (`mismatch_table`): GRAFT's mismatch rate below DDTree's on every task (the system);
      F1b-m  the same table: +TDES's below DDTree's at DDTree's budget (the mechanism, equal trees);
      F1c  `curves` (`tables.budget_curve`): the easy third's best budget above the hard third's;
      F5   `transfer` (`transfer_table`): the GSM8K-only scorer's mismatch reduction > 0 and TPS / DDTree
           > 1 outside noise on every task it was not trained on;
      F6   `oracles` (`regime_oracle`): SABA's mean retained share, its interval reaching the paper's;
      F6b  `oracles`: SABA above the best fixed budget (`against_fixed`), with its interval;
      T3   `betas` (`beta_table`): beta = 0.2 above the best other beta.
    A walked regime has the modeled figure only."""
    import pandas as pd

    items = {"F1b": mismatch, "F1b-m": mismatch, "F1c": curves, "F5": transfer, "F6": oracles, "F6b": oracles,
             "T3": betas}
    table = {k: {"source": src, "paper": words, "tests": VERDICT_RULES[k]} for k, (src, words) in FIGURE_CLAIMS.items()
             if items[k] is not None}
    tested = n_prompts >= MIN_PROMPTS

    def counts(tasks: int) -> str:
        return count_text(tasks, n_prompts, max_new_tokens)

    for name, regime in regimes.items():
        for figure in _figures(regime):
            col = f"{name} {figure}"
            if mismatch is not None and name in mismatch:
                for item, run in (("F1b", "GRAFT"), ("F1b-m", "+TDES")):
                    red = mismatch[name][f"{run} reduction %"]
                    v = _qualitative(bool((red > 0).all()), bool((red < 0).all()), tested)
                    table[item][col] = f"{v} (reduction {red.min():.0f}% to {red.max():.0f}%)"
                    table[item][f"{name} counts"] = counts(len(red))
            if curves is not None and name in curves:
                column = "tps" if figure == "wall-clock" else "m_tps"
                groups = curves[name][column].groupby(level=0, observed=True)
                best = groups.idxmax().map(lambda x: x[1])
                easy, hard = best.get("easy"), best.get("hard")
                grid = [b for _, b in curves[name].index]
                edge = at_edge(easy, grid) or at_edge(hard, grid)
                table["F1c"][col] = _best_budgets_cell(curves[name], column, easy, hard, edge, tested)
                table["F1c"][f"{name} counts"] = counts(1)
            if transfer is not None and name in transfer:
                table["F5"][col] = _transfer_cell(transfer[name], figure, n_prompts if tested else 0, MIN_PROMPTS)
                table["F5"][f"{name} counts"] = counts(len(transfer[name].drop(index="gsm8k", errors="ignore")))
            if oracles is not None and name in oracles and figure in oracles[name]:
                f = against_fixed(oracles[name][figure])
                direction = EDGE if at_edge(f["best_fixed_budget"], f["fixed"]) else sized_verdict(
                    f["ratio"], f["ci"], 1.0, f["prompts"] if tested else 0, min_prompts=MIN_PROMPTS)
                ci = f" [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]" if f["ci"] else ""
                table["F6b"][col] = (f"{direction} (SABA / best fixed B={f['best_fixed_budget']}: "
                                     f"{f['ratio']:.3f}x{ci}; "
                                     f"{f['saba']:.1%} vs {f['best_fixed']:.1%}{_runner_up_text(f)})")
                table["F6"][col] = _level_cell(f["saba"], f["saba_ci"], FIGURE6["mean_retained"],
                                               f["prompts"] if tested else 0, MIN_PROMPTS)
                for k in ("F6", "F6b"):
                    table[k][f"{name} counts"] = counts(1)
            if betas is not None and name in betas:
                table["T3"][col] = _beta_cell(betas[name], "TPS" if figure == "wall-clock" else "modeled TPS",
                                              n_prompts if tested else 0, MIN_PROMPTS)
                table["T3"][f"{name} counts"] = counts(1)
    return pd.DataFrame.from_dict(table, orient="index")

