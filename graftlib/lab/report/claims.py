"""The paper's throughput claims, checked on bench records: a verdict of direction and of size.

Nine claims of the paper (Tables 1-2, the abstract), each "run X decodes faster than run Y" by a size
(`CLAIMS`): C1 GRAFT > DDTree at its best budget, C2 > DFlash at its best chain, C3 > AR, C4 +TDES > DDTree
(+5.7%), C5 +SABA > DDTree (+12.8%), C6 GRAFT > DDTree (+19.4%), C7 GRAFT > +SABA, C8 > EAGLE-3, C9 > OPT-Tree.
Like for like: a Table 1 claim's size is the paper's number for the same model (Qwen3-8B) and the tasks drawn,
pooled by geometric mean (C3: GRAFT's speedup over AR on them, not the abstract's range); Table 2's (C4-C7) are
its nine-dataset means, the only ones printed (`reference_cells` names each claim's cells). Roles name runs
(`role_keys`); a method's "best" run is chosen per task after the fact by the ranking rule
(`modeled.best_run`), the same run for both figures and for Table 1; a best at the edge of its grid is `EDGE`.

Verdicts (`sized_verdict`) on ratio = TPS_X / TPS_Y paired per prompt, per claim, task and figure:
`not tested` (fewer than `MIN_PROMPTS` paired prompts, or a run missing), `inside noise` (the 95% bootstrap
interval over prompts contains 1.0; for the modeled figure also a margin within the model's own error
|(1 + r_X) / (1 + r_Y) - 1| on these runs), `opposite`, `direction only` (above 1, short of the paper's
size), `reproduced` (at or above it). Both figures get the same interval over prompts.

Details: docs/internals.md, `graftlib.lab.report.claims`.
"""

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from graftlib.core.errors import require
from graftlib.lab.report.metrics import by_task, geomean, pooled_speedup
from graftlib.lab.report.modeled import EDGE, best_run, edge_of, rank, relabeled
from graftlib.lab.report.paper import TABLE1, TABLE2

POOLED = "all tasks"
MIN_PROMPTS = 10  # paired held-out prompts a task below which a claim is `not tested`
VERDICTS = ("reproduced", "direction only", "inside noise", "opposite", "not tested")
FIGURES = ("wall-clock", "modeled")
PAPER_MODEL = "Qwen3-8B"  # the Table 1 rows the per-task sizes come from


@dataclass(frozen=True)
class Claim:
    id: str
    faster: str  # role of the run claimed faster
    slower: str
    source: str
    paper: str  # the claim in the paper's words
    size: float | str  # the paper's TPS ratio, or the Table 1 method whose per-task speedup GRAFT's is divided by
    # ("AR": GRAFT's speedup itself)


CLAIMS = (
    Claim("C1", "graft", "ddtree-best", "Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs DDTree)",
          "DDTree"),
    Claim("C2", "graft", "dflash-best", "Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs DFlash)",
          "DFlash"),
    Claim("C3", "graft", "ar", "Table 1 (abstract)", "GRAFT improves end-to-end throughput by 2.13-6.36x over AR",
          "AR"),
    Claim("C4", "+tdes", "ddtree", "Table 2", "+TDES improves TPS by 5.7% at DDTree's fixed budget", 1.057),
    Claim("C5", "+saba", "ddtree", "Table 2", "+SABA reduces tree size and still improves TPS by 12.8%", 1.128),
    Claim("C6", "graft", "ddtree", "Table 2", "GRAFT improves TPS by 19.4% over DDTree", 1.194),
    Claim("C7", "graft", "+saba", "Table 2", "GRAFT restores MAT over +SABA and reaches the highest TPS",
          TABLE2["GRAFT"][2] / TABLE2["+SABA"][2]),
    Claim("C8", "graft", "eagle3", "Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs EAGLE-3)",
          "EAGLE-3"),
    Claim("C9", "graft", "opt-tree", "Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs OPT-Tree)",
          "OPT-Tree"),
)
AR_DRAFTED = ("eagle3", "opt-tree")  # methods whose runs are one role each, the best of them per task


def _table1_tasks(tasks: list[str]) -> list[str]:
    """`tasks` that Table 1 has, or every Table 1 task where it has none of them."""
    rows = TABLE1[PAPER_MODEL]["GRAFT"]
    return [t for t in tasks if t in rows] or list(rows)


def paper_size(claim: Claim, tasks: list[str]) -> float:
    """The paper's TPS ratio for `claim` over `tasks` (module doc): a Table 2 number as it is, a Table 1 ratio
    GRAFT / the other method per task (Qwen3-8B; "AR": GRAFT's speedup), its geometric mean over several."""
    if isinstance(claim.size, float):
        return claim.size
    rows = TABLE1[PAPER_MODEL]
    return geomean([rows["GRAFT"][t][1] / (1.0 if claim.size == "AR" else rows[claim.size][t][1])
                    for t in _table1_tasks(tasks)])


def reference_cells(claim: Claim, tasks: list[str]) -> str:
    """Where `claim`'s paper number comes from, in words: the table, model and cells."""
    if isinstance(claim.size, float):
        return f"{claim.source}, Qwen3-8B, the mean over its nine datasets"
    known = _table1_tasks(tasks)
    over = "GRAFT's speedup" if claim.size == "AR" else f"GRAFT's speedup / {claim.size}'s"
    return f"Table 1, Qwen3-8B, {over} on {', '.join(known)}, geometric mean"


def sized_verdict(ratio: float, ci: tuple[float, float] | None, size: float, min_task_prompts: int,
                  model_error: float = 0.0, min_prompts: int = MIN_PROMPTS) -> str:
    """The module doc's verdict of TPS_X / TPS_Y = `ratio` with its interval `ci` against the paper's `size`."""
    if math.isnan(ratio) or ci is None or min_task_prompts < min_prompts:
        return "not tested"
    if ci[0] <= 1.0 <= ci[1] or abs(ratio - 1.0) <= model_error:
        return "inside noise"
    if ratio < 1.0:
        return "opposite"
    return "reproduced" if ratio >= size else "direction only"


def verdict_cell(row: dict, figure: str) -> str:
    """One figure of a claim row in words: "direction only (1.03x [1.01, 1.05] vs the paper's 1.194x)"."""
    v, ratio = row[f"verdict {figure}"], row.get(f"ratio {figure}", math.nan)
    if ratio is None or math.isnan(ratio):
        return v
    ci = row.get(f"CI95 {figure}")
    ci = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    k = row["prompts a task"]
    why = f", {k} prompt{'s' if k != 1 else ''} a task" if v == "not tested" else ""
    return f"{v} ({ratio:.3f}x{ci} vs the paper's {row['paper size']:.3f}x{why})"


SEARCHED = {"ddtree-best"}  # the roles whose budget is chosen after the fact from a grid (the chain's is capped by
# its block, so its largest budget is a bound, not an edge)


def role_keys(keys: set[str], budget: int | None = None, cap: int | None = None) -> dict[str, list[str]]:
    """Run keys per role. `budget` / `cap` default to the only +TDES budget / GRAFT cap run, if one."""
    def only(method):
        found = sorted(int(k.partition("@")[2]) for k in keys if k.partition("@")[0] == method)
        return found[0] if len(found) == 1 else None

    budget = only("ddtree+tdes") if budget is None else budget
    cap = only("graft") if cap is None else cap
    fixed = {"ar": "ar", "ddtree": f"ddtree@{budget}", "+tdes": f"ddtree+tdes@{budget}",
             "+saba": f"ddtree+saba@{cap}", "graft": f"graft@{cap}"}
    roles = {role: [k] if k in keys else [] for role, k in fixed.items()}
    for method in ("ddtree", "dflash"):
        roles[f"{method}-best"] = sorted((k for k in keys if k.partition("@")[0] == method),
                                         key=lambda k: int(k.partition("@")[2]))
    for method in AR_DRAFTED:
        roles[method] = sorted(k for k in keys if k.partition("@")[0] == method)
    return roles


def model_residual(records: list[dict], key: str, errors: dict[str, float] | None = None) -> float | None:
    """r = modeled speedup over AR / wall-clock speedup - 1 of run `key` on `records` (module doc): from
    `errors` by the run's method where given, measured where its records were verified and timed, else None."""
    mine = [r for r in records if r["key"] == key]
    if not mine or mine[0]["method"] == "ar":
        return 0.0
    if errors is not None:
        return errors.get(mine[0]["method"], 0.0)
    ar = {r["uid"]: r for r in records if r["key"] == "ar"}
    paired = [(ar[r["uid"]], r) for r in mine if r["uid"] in ar]
    timed = paired and not any(x.get("walked") or x.get("modeled_s") is None for p in paired for x in p)
    return pooled_speedup(paired, "modeled_s") / pooled_speedup(paired) - 1.0 if timed else None


def _model_error(records: list[dict], faster: str, slower: str, errors: dict[str, float] | None) -> float | None:
    r_x, r_y = model_residual(records, faster, errors), model_residual(records, slower, errors)
    return None if r_x is None or r_y is None else abs((1.0 + r_x) / (1.0 + r_y) - 1.0)


def tokens_of(records: list[dict]) -> int:
    """The new tokens a decode of `records` was allowed (their setting's max_new_tokens)."""
    return max((r.get("setting", {}).get("max_new_tokens") or r["new_tokens"]) for r in records)


def evaluate_claims(records: list[dict], budget: int | None = None, cap: int | None = None,
                    model_errors: dict[str, float] | None = None, min_prompts: int = MIN_PROMPTS) -> list[dict]:
    """One row per claim and task (and `POOLED` over the tasks), each under both figures (module doc).
    `model_errors`: each method's modeled-time error where the records cannot measure it (walked runs)."""
    require(len(records) > 0, "no bench records to check the claims on")
    tasks = by_task(records)
    roles = role_keys({r["key"] for r in records}, budget, cap)
    present = {t: {r["key"] for r in recs} for t, recs in tasks.items()}
    tokens = tokens_of(records)
    rows = []
    for claim in CLAIMS:
        runs = {t: {role: [k for k in roles[role] if k in present[t]] for role in (claim.faster, claim.slower)}
                for t in tasks}
        runs = {t: by_role for t, by_role in runs.items() if all(by_role.values())}  # tasks that ran both
        if not runs:
            rows.append({"claim": claim.id, "source": claim.source, "paper": claim.paper, "task": POOLED,
                         "paper size": paper_size(claim, list(tasks)), "tasks": 0, "prompts": 0,
                         "prompts a task": 0, "tokens": tokens,
                         **{f"verdict {f}": "not tested" for f in FIGURES}})
            continue
        pooled = [r for t in runs for r in tasks[t]]
        cells = defaultdict(dict)
        # one best budget per task for both figures, chosen by the ranking rule as Table 1 chooses it, so every
        # figure, table and ratio that divides by "DDTree" divides by the same run
        chosen = {role: {t: best_run(tasks[t], runs[t][role], "rule") for t in runs}
                  for role in (claim.faster, claim.slower)}
        edge = {t for role in SEARCHED & {claim.faster, claim.slower} for t in runs
                if edge_of(runs[t][role], chosen[role][t])}  # a best DDTree budget its grid does not bracket
        for figure in FIGURES:
            per_task = {}
            for task, recs in [*((t, tasks[t]) for t in runs), (POOLED, pooled)]:
                pick = {role: c if task == POOLED else {task: c[task]} for role, c in chosen.items()}
                compared = (relabeled(recs, pick[claim.slower], "slower")
                            + relabeled(recs, pick[claim.faster], "faster") + [r for r in recs if r["key"] == "ar"])
                r = rank(compared, "slower", "faster")
                per_task.setdefault(task, r.prompts)
                fewest = min(per_task[t] for t in runs) if task == POOLED else r.prompts
                size = paper_size(claim, list(runs) if task == POOLED else [task])
                ratio, ci = (r.wall_ratio, r.wall_ci) if figure == "wall-clock" else (r.modeled_ratio, r.modeled_ci)
                error = 0.0
                if figure == "modeled":
                    measured = _model_error(compared, "faster", "slower", model_errors)
                    error = measured or 0.0
                    cells[task]["model error"] = "unmeasured" if measured is None else measured
                cells[task].update({
                    f"runs {figure}": _runs(pick[claim.faster]) + " vs " + _runs(pick[claim.slower]),
                    f"ratio {figure}": ratio, f"CI95 {figure}": ci,
                    f"verdict {figure}": EDGE if edge & ({task} if task != POOLED else set(runs)) else
                    sized_verdict(ratio, ci, size, fewest, error, min_prompts),
                    "paper size": size, "tasks": len(runs) if task == POOLED else 1, "prompts": r.prompts,
                    "prompts a task": fewest, "tokens": tokens})
        rows += [{"claim": claim.id, "source": claim.source, "paper": claim.paper, "task": t, **c}
                 for t, c in cells.items()]
    return rows


def _runs(chosen: dict[str, str]) -> str:
    """The run chosen per task, once if every task chose the same."""
    keys = sorted(set(chosen.values()))
    return keys[0] if len(keys) == 1 else "/".join(f"{t}:{k}" for t, k in sorted(chosen.items()))


def counts_text(row: dict) -> str:
    """A claim row's counts: "3 tasks x 10 prompts x 128 tokens" (prompts: the fewest of a task)."""
    return count_text(row.get("tasks", 0), row.get("prompts a task", 0), row["tokens"])


def count_text(tasks: int, prompts: int, tokens: int) -> str:
    """ "3 tasks x 10 prompts x 128 tokens", singular where one."""
    def n(k, word):
        return f"{k} {word}{'s' if k != 1 else ''}"
    return f"{n(tasks, 'task')} x {n(prompts, 'prompt')} x {n(tokens, 'token')}"


def claims_summary(rows: list[dict]) -> list[dict]:
    """Per claim and figure: the pooled verdict with its ratio and the paper's size, then the per-task
    verdicts counted, e.g. "direction only (1.031x [1.01, 1.05] vs the paper's 1.057x) (tasks: 2 direction only,
    1 inside noise)", and the counts behind it."""
    out = []
    for claim in CLAIMS:
        mine = [r for r in rows if r["claim"] == claim.id]
        pooled = next(r for r in mine if r["task"] == POOLED)
        tasks = [r for r in mine if r["task"] != POOLED]
        row = {"claim": claim.id, "source": claim.source, "paper": claim.paper, "counts": counts_text(pooled)}
        for figure in FIGURES:
            counts = Counter(r[f"verdict {figure}"] for r in tasks)
            per_task = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
            row[figure] = verdict_cell(pooled, figure) + (f" (tasks: {per_task})" if tasks else "")
        out.append(row)
    return out


def format_claims(rows: list[dict]) -> str:
    """The claims table: per claim and task, the ratio, its interval and verdict under each figure."""
    head = (f"{'claim':<5} {'task':<10} {'n':>3} {'paper':>7} {'wall':>7} {'wall CI95':>15} {'verdict':<14} "
            f"{'modeled':>8} {'modeled CI95':>15} {'err':>6} {'verdict':<14} runs (wall-clock choice)")
    lines = [head, "-" * len(head)]

    def ci_text(ci):
        return f"{'-':>15}" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]".rjust(15)

    for r in rows:
        if "ratio wall-clock" not in r:
            lines.append(f"{r['claim']:<5} {r['task']:<10} {'':>3} not tested (a run missing): {r['paper']}")
            continue
        err = r.get("model error", "")
        err = f"{100 * err:>5.1f}%" if isinstance(err, float) else f"{'-':>6}"
        lines.append(f"{r['claim']:<5} {r['task']:<10} {r['prompts']:>3} {r['paper size']:>6.3f}x "
                     f"{r['ratio wall-clock']:>6.3f}x {ci_text(r['CI95 wall-clock'])} {r['verdict wall-clock']:<14} "
                     f"{r['ratio modeled']:>7.3f}x {ci_text(r['CI95 modeled'])} {err} {r['verdict modeled']:<14} "
                     f"{r['runs wall-clock']}")
    lines.append("claims: " + "; ".join(f"{c.id} {c.paper} ({c.source})" for c in CLAIMS))
    lines.append("ratio: TPS faster / slower run, paired per prompt, with its 95% bootstrap interval over prompts "
                 "under "
                 f"each figure; paper: the paper's ratio; err: the model's measured error on the two runs; verdicts: "
                 f"{', '.join(VERDICTS)} (graftlib.lab.report.claims; not tested under {MIN_PROMPTS} prompts a task)")
    return "\n".join(lines)
