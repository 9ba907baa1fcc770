"""Metrics over benchmark records, defined once for the CLI, tests and notebooks.

One record = one (prompt, method, budget) decode (see `graftlib.lab.run.bench`). Aggregates follow
DFlash/DDTree: MAT (tau) = accepted tokens per round including the bonus token, pooled over
all rounds of all prompts (a round an adaptive gate runs as a plain AR step counts, with 1: MAT
stays tokens per target forward); tokens/s = decoded tokens after the first / decode time (prefill
excluded), pooled; speedup = method tokens/s / AR tokens/s over the *same* prompts (= AR
time-per-output-token / method TPOT, as the outputs are token-identical). A multi-turn record
(`graftlib.lab.report.multiturn`) counts as its totals: its decoded tokens are every turn's after the first
(`decoded_tokens`) over its summed decode time, and its rounds join the pool.

Modeled columns (`graftlib.lab.report.modeled`): the same pooled tokens/s and paired speedup
from each record's `modeled_s` (its rounds priced by a cost profile, eq. 17) instead of its
`decode_s`; nan when a record has no modeled time. The records of one summary must share one
cost profile (`cost_profile`, named in every row), else mixing machines' costs would be silent.

Where a round's time goes (`round_stages`, `stage_table`: the breakdown beside Table 1): per round, each stage's
milliseconds (draft, tree, verify, commit of `RoundRecord`'s stage seconds summed in `stage_s`), `other` (the rest
of `decode_s`, so the stages sum to the round), MAT and ms per token; for an AR-drafted run (EAGLE-3, OPT-Tree) also
its drafter forwards per round and the context and depth forwards' mean milliseconds (`draft_step_s`).
"""

import math
import statistics
from collections import defaultdict

import numpy as np

from graftlib.core.errors import require
from graftlib.lab.report.multiturn import turn_entries


def geomean(values: list[float]) -> float:
    """The geometric mean of positive `values`; nan for none."""
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")

def decoded_tokens(rec: dict) -> int:
    """Tokens a record decoded after each turn's first (that one comes from the prefill)."""
    return sum(t["new_tokens"] - 1 for t in turn_entries(rec))


def verdict_of(rec: dict) -> str | None:
    """A record's exactness verdict (`graftlib.core.exactness`); records written before verdicts
    (float32 only) read theirs off `matches_ar`; None where there is none (AR itself, T > 0)."""
    if rec.get("verdict"):
        return rec["verdict"]
    return {True: "exact", False: "mismatch"}.get(rec.get("matches_ar"))


def exactness_cell(row: dict) -> str:
    """A summary row's exactness in a few characters: yes, `N tie` or `N MISMATCH` (a row without
    verdict counts: yes or NO by its `exact` flag); `walked` for runs whose rounds were walked along
    AR's tokens (`graftlib.core.ar_path`: exact by construction, so no test of exactness)."""
    if row.get("walked"):
        return "walked"
    if "mismatches" not in row:
        return "yes" if row.get("exact", True) else "NO"
    if row["mismatches"]:
        return f"{row['mismatches']} MISMATCH"
    return f"{row['ties']} tie" if row.get("ties") else "yes"


def summarize(records: list[dict], baseline: str = "ar") -> list[dict]:
    """Rows per run key (method@budget), in first-seen order, with speedup vs `baseline`."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[r["key"]].append(r)
    base = {r["uid"]: r for r in groups.get(baseline, [])}
    profiles = {(r["cost_profile"]["name"], r["cost_profile"]["id"]) for r in records if r.get("cost_profile")}
    require(len(profiles) <= 1, f"records priced under several cost profiles {sorted(profiles)}: "
            "reprice them under one (graftlib.lab.report.modeled.reprice)")
    profile = "{} ({})".format(*next(iter(profiles))) if profiles else None
    rows = []
    for key, recs in groups.items():
        rounds = sum(r["rounds"] for r in recs)
        decoded = sum(decoded_tokens(r) for r in recs)
        decode_s = sum(r["decode_s"] for r in recs)
        row = {
            "key": key, "method": recs[0]["method"], "budget": recs[0]["budget"], "prompts": len(recs),
            "mat": sum(r["accepted_sum"] for r in recs) / rounds if rounds else 1.0,
            "tokens_per_s": decoded / decode_s if decode_s else float("nan"),
            "mean_nodes": sum(r["nodes_sum"] for r in recs) / rounds if rounds else 0.0,
            "ar_share": sum(r.get("ar_rounds", 0) for r in recs) / rounds if rounds else 0.0,
            "declined_share": sum(r.get("declined_rounds", 0) for r in recs) / rounds if rounds else 0.0,
            "exact": all(r.get("matches_ar") is not False for r in recs),  # every greedy decode token-equal to AR
            "ties": sum(verdict_of(r) == "tie" for r in recs),
            "mismatches": sum(verdict_of(r) == "mismatch" for r in recs),
            "walked": all(r.get("walked", False) for r in recs),  # rounds walked, not verified (no verdict)
        }
        eligible = sum(r.get("eligible_sum", 0) for r in recs)
        row["mismatch_rate"] = sum(r.get("mismatch_sum", 0) for r in recs) / eligible if eligible else float("nan")
        for stage in ("draft", "tree", "verify", "commit"):
            row[f"{stage}_ms"] = 1000 * sum(r["stage_s"][stage] for r in recs) / rounds if rounds else 0.0
        paired = [(base[r["uid"]], r) for r in recs if r["uid"] in base]
        row["speedup"] = pooled_speedup(paired) if paired else float("nan")
        row["speedup_ci"] = speedup_ci(paired)
        modeled_s = sum(r["modeled_s"] for r in recs) if all(r.get("modeled_s") is not None for r in recs) else 0.0
        row["modeled_tokens_per_s"] = decoded / modeled_s if modeled_s else float("nan")
        priced_pairs = paired and all(x.get("modeled_s") is not None for p in paired for x in p)
        row["modeled_speedup"] = pooled_speedup(paired, "modeled_s") if priced_pairs else float("nan")
        row["modeled_speedup_ci"] = speedup_ci(paired, time="modeled_s") if priced_pairs else None
        row["cost_profile"] = profile
        rows.append(row)
    return rows


def by_task(records: list[dict]) -> dict[str, list[dict]]:
    """Records per task (their `task`, "custom" without one), tasks first seen first."""
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[r.get("task", "custom")].append(r)
    return dict(out)


def summarize_tasks(records: list[dict], baseline: str = "ar") -> list[dict]:
    """`summarize` per task: rows with `task`."""
    return [dict(row, task=task) for task, recs in by_task(records).items() for row in summarize(recs, baseline)]


def pooled_speedup(paired: list[tuple[dict, dict]], time: str = "decode_s") -> float:
    """Baseline time per output token / method time per output token, pooled over (baseline, method)
    pairs; `time` names the records' time field (`modeled_s`: the modeled speedup)."""
    t_method = sum(m[time] for _, m in paired) / sum(decoded_tokens(m) for _, m in paired)
    t_base = sum(b[time] for b, _ in paired) / sum(decoded_tokens(b) for b, _ in paired)
    return t_base / t_method


def speedup_ci(paired: list[tuple[dict, dict]], level: float = 0.95, resamples: int = 2000,
               seed: int = 0, time: str = "decode_s") -> tuple[float, float] | None:
    """Percentile bootstrap interval of `pooled_speedup` over prompts (pairs resampled together, so
    a prompt's own difficulty cancels; the spread is the method-vs-baseline noise across prompts,
    machine drift included). `time` names the records' time field: `modeled_s` gives the modeled
    ratio's interval, whose spread is the prompts' sampling alone. None with fewer than 3 pairs or
    a pair without that field. Deterministic (fixed seed)."""
    if len(paired) < 3 or any(x.get(time) is None for pair in paired for x in pair):
        return None
    rng = np.random.default_rng(seed)
    m_s = np.array([m[time] for _, m in paired]); m_n = np.array([decoded_tokens(m) for _, m in paired])
    b_s = np.array([b[time] for b, _ in paired]); b_n = np.array([decoded_tokens(b) for b, _ in paired])
    idx = rng.integers(0, len(paired), size=(resamples, len(paired)))
    ratios = (b_s[idx].sum(1) / b_n[idx].sum(1)) / (m_s[idx].sum(1) / m_n[idx].sum(1))
    tail = 100 * (1 - level) / 2
    return float(np.percentile(ratios, tail)), float(np.percentile(ratios, 100 - tail))


def ratio_ci(num: list[float], den: list[float], level: float = 0.95, resamples: int = 2000,
             seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of sum(num) / sum(den) over units (e.g. prompts: each its sums over its
    rounds) resampled together; None with fewer than 3 units. Deterministic (fixed seed)."""
    if len(num) < 3:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(resamples, len(num)))
    ratios = np.asarray(num)[idx].sum(1) / np.asarray(den)[idx].sum(1)
    tail = 100 * (1 - level) / 2
    return float(np.percentile(ratios, tail)), float(np.percentile(ratios, 100 - tail))


def format_table(rows: list[dict]) -> str:
    head = (f"{'run':<14} {'n':>3} {'MAT':>5} {'tok/s':>7} {'speedup':>7} {'CI95':>11} {'nodes':>6} "
            f"{'AR%':>4} {'decl%':>5} {'mism%':>5} {'draft':>7} {'tree':>6} {'verify':>7} {'commit':>6} "
            f"{'m-tok/s':>7} {'m-spd':>6} exact")
    lines = [head, "-" * len(head)]
    for r in rows:
        mism = r.get("mismatch_rate", float("nan"))
        mism = f"{'-':>5}" if math.isnan(mism) else f"{100 * mism:>5.1f}"
        ci = r.get("speedup_ci")
        ci = f"{'-':>11}" if ci is None else f"{ci[0]:>5.2f}-{ci[1]:<5.2f}"
        lines.append(
            f"{r['key']:<14} {r['prompts']:>3} {r['mat']:>5.2f} {r['tokens_per_s']:>7.2f} {r['speedup']:>6.2f}x {ci} "
            f"{r['mean_nodes']:>6.1f} {100 * r['ar_share']:>4.0f} {100 * r.get('declined_share', 0.0):>5.0f} {mism} "
            f"{r['draft_ms']:>7.1f} {r['tree_ms']:>6.2f} "
            f"{r['verify_ms']:>7.1f} {r['commit_ms']:>6.2f} {modeled_cells(r)} {exactness_cell(r)}")
    lines.append("per-stage columns: ms per round; tok/s: decoded tokens / decode time (prefill excluded); "
                 "CI95: bootstrap interval of the speedup over prompts (metrics.speedup_ci); "
                 "AR%: rounds an adaptive gate ran as plain AR steps (decl%: of all rounds, those it declined "
                 "after drafting); mism%: parent-child mismatch rate "
                 "(graftlib.core.tree.parent_mismatch) over drafted rounds that could continue; "
                 "exact: yes, or N tie (decodes that left AR's tokens at a certified near-tie of the target's "
                 "top-2 logits, graftlib.core.exactness) or N MISMATCH (a bug); "
                 "m-tok/s, m-spd: modeled tokens/s and speedup, the rounds priced by the cost profile "
                 f"{next((r['cost_profile'] for r in rows if r.get('cost_profile')), 'none')} "
                 "(graftlib.lab.report.modeled)")
    return "\n".join(lines)


def modeled_cells(row: dict) -> str:
    """The table's modeled tokens/s and speedup cells; dashes without a modeled figure."""
    tps, spd = row.get("modeled_tokens_per_s", math.nan), row.get("modeled_speedup", math.nan)
    tps_cell = f"{'-':>7}" if math.isnan(tps) else f"{tps:>7.2f}"
    return tps_cell + " " + (f"{'-':>6}" if math.isnan(spd) else f"{spd:>5.2f}x")


# ----------------------------------------------------------------------------- stages of a round

STAGES = ("draft", "tree", "verify", "commit")


def round_stages(records: list[dict]) -> dict:
    """One run's pooled stage breakdown (module doc); `records` share one run key."""
    require(len(records) > 0, "stage breakdown: no records")
    keys = {r["key"] for r in records}
    require(len(keys) == 1, f"stage breakdown: records of several runs {sorted(keys)}")
    rounds = sum(r["rounds"] for r in records)
    require(rounds > 0, f"stage breakdown: run {keys.pop()} has no rounds")
    ms = {k: 1000 * sum(r["stage_s"][k] for r in records) / rounds for k in STAGES}
    round_ms = 1000 * sum(r["decode_s"] for r in records) / rounds
    mat = sum(r["accepted_sum"] for r in records) / rounds
    row = {"rounds": rounds, "MAT": mat, **{f"{k} ms": v for k, v in ms.items()},
           "other ms": round_ms - sum(ms.values()), "round ms": round_ms, "ms/token": round_ms / mat}
    steps = [s for r in records for s in r.get("draft_step_s") or [] if s]
    if steps:  # an AR drafter: the context forward, then one per depth
        depth = [t for s in steps for t in s[1:]]
        row.update({"forwards/round": sum(map(len, steps)) / rounds,
                    "context fwd ms": 1000 * statistics.fmean(s[0] for s in steps),
                    "depth fwd ms": 1000 * statistics.fmean(depth) if depth else 0.0})
    return row


def stage_table(records: list[dict], runs: list[tuple[str, str, str]]) -> list[dict]:
    """Rows of `round_stages` for each (task, method label, run key) of `runs` (Table 1's shown runs)."""
    tasks = by_task(records)
    rows = []
    for task, label, key in runs:
        recs = [r for r in tasks.get(task, []) if r["key"] == key]
        require(recs, f"stage breakdown: no records of {key} on {task}")
        rows.append({"task": task, "method": label, "run": key, **round_stages(recs)})
    return rows


DETERMINISTIC = ("accepted", "round_shapes", "rounds", "nodes_sum", "accepted_sum", "mismatch_sum", "new_tokens",
                 "verdict", "matches_ar")  # a decode's columns that no clock moves


def same_decodes(old: str, new: str) -> int:
    """Compare two benches of the same prompts and runs (`experiments/same-decodes.sh`) on their `DETERMINISTIC`
    columns, record by record (run key, prompt uid); print "identical" or each difference. 0 if identical, else 1."""
    from graftlib.core.records import read_records

    a, b = ({(r["key"], r["uid"]): r for r in read_records(path) if "key" in r} for path in (old, new))
    require(a and set(a) == set(b), f"{old} and {new} hold different runs or prompts: compare the same bench")
    diff = [f"{key} {uid}: {col} {a[key, uid].get(col)!r} -> {b[key, uid].get(col)!r}"
            for key, uid in sorted(a) for col in DETERMINISTIC if a[key, uid].get(col) != b[key, uid].get(col)]
    print("\n".join(diff) if diff else f"identical: {len(a)} decodes, columns {', '.join(DETERMINISTIC)}")
    return 1 if diff else 0
