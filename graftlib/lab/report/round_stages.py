"""Where a round's time goes: the stage breakdown beside Table 1.

A decode loop round is draft -> build tree -> verify -> commit (`graftlib.core.decode`); a bench
record keeps each stage's seconds summed over its rounds (`stage_s`), and an AR-drafted decode
(EAGLE-3, OPT-Tree) also each round's drafter forwards (`draft_step_s`: per round, the context
step's seconds, then one entry per expanded depth; `RoundRecord.t_draft_steps`). A DFlash-drafted
round (chain, DDTree, GRAFT) drafts with one block forward, so it has no per-forward list.

`round_stages(records)` pools one run's records (every prompt and turn): milliseconds per round of
each stage, the whole round (`decode_s` / rounds, so host work outside the four stages shows as
`other`), MAT and the milliseconds per committed token (round / MAT); for an AR-drafted run, the
drafter forwards per round and the mean milliseconds of the context forward and of each depth
forward. Every per-round figure is over all rounds, so draft + tree + verify + commit + other =
round. `stage_table(records, runs)` is one row per (task, method, run) that Table 1 shows.
"""

import statistics

from graftlib.core.errors import require
from graftlib.lab.report.metrics import by_task

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
