"""TDES against DFlash 2's pairwise path selector as DDTree's edge score, and the two together.

Both attack GRAFT's problem, parent-child mismatch in the best-first heap: TDES (eq. 13) adds
beta * f~(p, c, d), learned from the target's traces, to the draft's log q; DFlash 2's selector reweights
each parent's candidate pool by its transition score T_t(p, c) = <A(p) * W h_t, B(c)>, learned on the
drafter's side (`graftlib.methods.selector`). The comparison holds everything else fixed: one drafter
(a DFlash 2 drafter whose selector was trained with the drafter frozen, `graft train-drafter --parts-only`,
so TDES's scorer and the selector rerank the very same drafts), one budget, one regime
(`graftlib.lab.run.regimes`: its budget, its costs, verified or walked). `edge_score_runs` lists AR, DDTree,
+TDES, +selector and +TDES+selector at the regime's fixed budget, `edge_score_records` decodes them on
a few tasks into `<results_dir>/edge_scores_<regime>.jsonl` (resumable like every bench), and
`edge_score_table` gives per task and pooled over tasks: nodes per round, MAT, the mismatch rate and
its reduction against DDTree, tokens/s against DDTree modeled (and, where the decodes were verified, measured,
paired per prompt, with its bootstrap 95% interval from 3 prompts on: `metrics.speedup_ci`),
beside the paper's Table 2 +TDES row (Qwen3-8B, A100; the paper has no selector); `mismatches` counts
the decodes that left AR's tokens at no near-tie (a bug; walked decodes have no verdict).
"""

from pathlib import Path

from graftlib.core.errors import require
from graftlib.lab.report.metrics import by_task, summarize
from graftlib.lab.report.paper import TABLE2
from graftlib.lab.report.regime_tables import Regime
from graftlib.lab.run.bench import Run
from graftlib.lab.run.regimes import tasks_bench

EDGE_SCORES = {"DDTree": "ddtree", "+TDES": "ddtree+tdes", "+selector": "ddtree+sel",
               "+TDES+selector": "ddtree+tdes+sel"}
POOLED = "pooled"  # the row pooling every task's prompts


def edge_score_runs(regime: Regime) -> list[Run]:
    """AR and the four edge scores of `EDGE_SCORES` at `regime`'s fixed budget."""
    return [Run("ar", None), *(Run(m, regime.budget) for m in EDGE_SCORES.values())]


def edge_score_records(pair, regime: Regime, tasks: list[str], n_prompts: int, max_new_tokens: int, results_dir,
                       progress: bool = False) -> list[dict]:
    """`edge_score_runs` in `regime` on the first `n_prompts` eval prompts of each task. The pair's drafter must
    have a selector (a one-line error otherwise)."""
    require(getattr(pair.drafter, "candidate_selector", None) is not None,
            "TDES vs the selector: the pair's drafter has no DFlash 2 candidate selector (selector_rank in its "
            "config's dflash_config; `graft train-drafter --selector-rank R --parts-only` adds one)")
    return tasks_bench(pair, regime, tasks, n_prompts, edge_score_runs(regime), max_new_tokens,
                       Path(results_dir) / f"edge_scores_{regime.name}.jsonl", progress=progress)


def _rows(records: list[dict], regime: Regime, task: str) -> list[dict]:
    s = {row["key"]: row for row in summarize(records)}
    vs = {row["key"]: row for row in summarize(records, baseline=f"ddtree@{regime.budget}")}  # paired per prompt
    base = s.get(f"ddtree@{regime.budget}")
    require(base is not None, f"TDES vs the selector in the {regime.name} regime: no ddtree@{regime.budget} records")
    rows = []
    for label, method in EDGE_SCORES.items():
        r = s.get(f"{method}@{regime.budget}")
        if r is None:
            continue
        row = {"regime": regime.name, "task": task, "edge score": label, "run": r["key"], "prompts": r["prompts"],
               "nodes/round": r["mean_nodes"], "MAT": r["mat"], "mismatch rate": r["mismatch_rate"],
               "mismatch reduction %": (100 * (1 - r["mismatch_rate"] / base["mismatch_rate"])
                                        if base["mismatch_rate"] else float("nan")),
               "modeled TPS / DDTree": r["modeled_tokens_per_s"] / base["modeled_tokens_per_s"],
               "speedup modeled": r["modeled_speedup"], "mismatches": r["mismatches"]}
        if not (r["walked"] or base["walked"]):
            lo, hi = vs[r["key"]]["speedup_ci"] or (None, None)
            row.update({"TPS / DDTree": vs[r["key"]]["speedup"], "TPS / DDTree lo": lo, "TPS / DDTree hi": hi})
        row["paper TPS / DDTree"] = 1 + TABLE2[label][3] / 100 if label in TABLE2 else None
        rows.append(row)
    return rows


def edge_score_table(records: list[dict], regime: Regime):
    """Per task and pooled over the tasks (`POOLED`), per edge score: the figures of the module doc. A pandas
    DataFrame indexed by (task, edge score)."""
    import pandas as pd

    rows = [row for task, recs in by_task(records).items() for row in _rows(recs, regime, task)]
    rows += _rows(records, regime, POOLED)
    return pd.DataFrame(rows).set_index(["task", "edge score"])

