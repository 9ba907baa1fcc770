"""Metrics over benchmark records, defined once for the CLI, tests and notebooks.

One record = one (prompt, method, budget) decode (see `graftlib.bench`). Aggregates follow
DFlash/DDTree: MAT (tau) = accepted tokens per round including the bonus token, pooled over
all rounds of all prompts (a round an adaptive gate runs as a plain AR step counts, with 1: MAT
stays tokens per target forward); tokens/s = decoded tokens after the first / decode time (prefill
excluded), pooled; speedup = method tokens/s / AR tokens/s over the *same* prompts (= AR
time-per-output-token / method TPOT, as the outputs are token-identical).
"""

import math
from collections import defaultdict


def summarize(records: list[dict], baseline: str = "ar") -> list[dict]:
    """Rows per run key (method@budget), in first-seen order, with speedup vs `baseline`."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[r["key"]].append(r)
    base = {r["uid"]: r for r in groups.get(baseline, [])}
    rows = []
    for key, recs in groups.items():
        rounds = sum(r["rounds"] for r in recs)
        decoded = sum(r["new_tokens"] - 1 for r in recs)
        decode_s = sum(r["decode_s"] for r in recs)
        row = {
            "key": key, "method": recs[0]["method"], "budget": recs[0]["budget"], "prompts": len(recs),
            "mat": sum(r["accepted_sum"] for r in recs) / rounds if rounds else 1.0,
            "tokens_per_s": decoded / decode_s if decode_s else float("nan"),
            "mean_nodes": sum(r["nodes_sum"] for r in recs) / rounds if rounds else 0.0,
            "ar_share": sum(r.get("ar_rounds", 0) for r in recs) / rounds if rounds else 0.0,
            "declined_share": sum(r.get("declined_rounds", 0) for r in recs) / rounds if rounds else 0.0,
            "exact": all(r.get("matches_ar") is not False for r in recs),
        }
        eligible = sum(r.get("eligible_sum", 0) for r in recs)
        row["mismatch_rate"] = sum(r.get("mismatch_sum", 0) for r in recs) / eligible if eligible else float("nan")
        for stage in ("draft", "tree", "verify", "commit"):
            row[f"{stage}_ms"] = 1000 * sum(r["stage_s"][stage] for r in recs) / rounds if rounds else 0.0
        paired = [r for r in recs if r["uid"] in base]
        if paired:
            t_method = sum(r["decode_s"] for r in paired) / sum(r["new_tokens"] - 1 for r in paired)
            t_base = sum(base[r["uid"]]["decode_s"] for r in paired) / sum(base[r["uid"]]["new_tokens"] - 1
                                                                           for r in paired)
            row["speedup"] = t_base / t_method
        else:
            row["speedup"] = float("nan")
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    head = (f"{'run':<14} {'n':>3} {'MAT':>5} {'tok/s':>7} {'speedup':>7} {'nodes':>6} "
            f"{'AR%':>4} {'decl%':>5} {'mism%':>5} {'draft':>7} {'tree':>6} {'verify':>7} {'commit':>6} exact")
    lines = [head, "-" * len(head)]
    for r in rows:
        mism = r.get("mismatch_rate", float("nan"))
        mism = f"{'-':>5}" if math.isnan(mism) else f"{100 * mism:>5.1f}"
        lines.append(
            f"{r['key']:<14} {r['prompts']:>3} {r['mat']:>5.2f} {r['tokens_per_s']:>7.2f} {r['speedup']:>6.2f}x "
            f"{r['mean_nodes']:>6.1f} {100 * r['ar_share']:>4.0f} {100 * r.get('declined_share', 0.0):>5.0f} {mism} {r['draft_ms']:>7.1f} {r['tree_ms']:>6.2f} "
            f"{r['verify_ms']:>7.1f} {r['commit_ms']:>6.2f} {'yes' if r['exact'] else 'NO'}")
    lines.append("per-stage columns: ms per round; tok/s: decoded tokens / decode time (prefill excluded); "
                 "AR%: rounds an adaptive gate ran as plain AR steps (decl%: of all rounds, those it declined "
                 "after drafting); mism%: parent-child mismatch rate "
                 "(graftlib.tree.parent_mismatch) over drafted rounds that could continue")
    return "\n".join(lines)
