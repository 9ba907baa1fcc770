"""The paper's throughput claims, checked on bench records under both figures (issues 16, 18).

The GRAFT paper (Tables 1-2 and their text, the abstract) makes nine claims that a benchmark on
any pair can test, each "run X decodes faster than run Y" (`CLAIMS`, the paper's words beside):
  C1 GRAFT > DDTree at its best fixed budget        Table 1 (i): highest speedup in every group
  C2 GRAFT > DFlash at its best chain length        Table 1 (i)
  C3 GRAFT > AR                                     abstract: 2.13-6.36x end-to-end speedup
  C4 +TDES > DDTree, the same fixed budget          Table 2: +5.7% TPS
  C5 +SABA > DDTree at that budget                  Table 2: +12.8% TPS with fewer nodes
  C6 GRAFT > DDTree at that budget                  Table 2: +19.4% TPS
  C7 GRAFT > +SABA                                  Table 2: TDES restores MAT, highest TPS
  C8 GRAFT > EAGLE-3 (its dynamic tree)             Table 1 (i): the AR-drafter baselines too
  C9 GRAFT > OPT-Tree                               Table 1 (i)
(The MAT claim of Table 1 (ii) and TDES's per-round overhead are not throughput orderings; Table 3
and Figure 5 need their own sweeps.) Roles name runs: `ddtree`, `+tdes`, `+saba`, `graft` at the
budgets of Table 2 (`budget`: DDTree's and +TDES's fixed budget, `cap`: the adaptive methods'),
`ddtree-best` / `dflash-best` the best of the method's runs per task, chosen after the fact by the
figure under test (its own noise included, as the paper's per-task best budgets); `eagle3` and
`opt-tree` the best of those methods' runs the same way (Table 1 runs each at its release's settings:
usually one run each).

Each claim is checked per task and pooled over the tasks (the chosen runs relabeled, so the
pairing stays per prompt; `graftlib.lab.modeled.relabeled`). Wall clock: `holds` when the paired
bootstrap interval of TPS_X / TPS_Y lies above 1, `fails` below 1, `inside noise` when it holds
1, `no interval` under 3 prompts. Modeled: `holds` / `fails` / `tie` by the deterministic ratio
(no interval: it does not move between runs). A claim whose runs are missing is `not run`.
"""

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from graftlib.core.errors import require
from graftlib.lab.metrics import by_task
from graftlib.lab.modeled import best_run, rank, relabeled

POOLED = "all tasks"


@dataclass(frozen=True)
class Claim:
    id: str
    faster: str  # role of the run claimed faster
    slower: str
    source: str
    paper: str  # the claim in the paper's words


CLAIMS = (
    Claim("C1", "graft", "ddtree-best", "Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs DDTree)"),
    Claim("C2", "graft", "dflash-best", "Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs DFlash)"),
    Claim("C3", "graft", "ar", "abstract", "GRAFT improves end-to-end throughput by 2.13-6.36x over AR"),
    Claim("C4", "+tdes", "ddtree", "Table 2", "+TDES improves TPS by 5.7% at DDTree's fixed budget"),
    Claim("C5", "+saba", "ddtree", "Table 2", "+SABA reduces tree size and still improves TPS by 12.8%"),
    Claim("C6", "graft", "ddtree", "Table 2", "GRAFT improves TPS by 19.4% over DDTree"),
    Claim("C7", "graft", "+saba", "Table 2", "GRAFT restores MAT over +SABA and reaches the highest TPS"),
    Claim("C8", "graft", "eagle3", "Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs EAGLE-3)"),
    Claim("C9", "graft", "opt-tree", "Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs OPT-Tree)"),
)
AR_DRAFTED = ("eagle3", "opt-tree")  # methods whose runs are one role each, the best of them per task


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


def verdict(figure: str, ratio: float, ci: tuple[float, float] | None) -> str:
    """The module doc's verdict of "faster / slower = ratio" under one figure."""
    if math.isnan(ratio):
        return "no modeled figure"
    if figure == "modeled":
        return "holds" if ratio > 1.0 else "fails" if ratio < 1.0 else "tie"
    if ci is None:
        return "no interval"
    return "holds" if ci[0] > 1.0 else "fails" if ci[1] < 1.0 else "inside noise"


def evaluate_claims(records: list[dict], budget: int | None = None, cap: int | None = None) -> list[dict]:
    """One row per claim and task (and `POOLED` over the tasks), each under both figures (module doc)."""
    require(len(records) > 0, "no bench records to check the claims on")
    tasks = by_task(records)
    roles = role_keys({r["key"] for r in records}, budget, cap)
    present = {t: {r["key"] for r in recs} for t, recs in tasks.items()}
    rows = []
    for claim in CLAIMS:
        runs = {t: {role: [k for k in roles[role] if k in present[t]] for role in (claim.faster, claim.slower)}
                for t in tasks}
        runs = {t: by_role for t, by_role in runs.items() if all(by_role.values())}  # tasks that ran both
        if not runs:
            rows.append({"claim": claim.id, "source": claim.source, "paper": claim.paper, "task": POOLED,
                         "verdict wall-clock": "not run", "verdict modeled": "not run"})
            continue
        pooled = [r for t in runs for r in tasks[t]]
        cells = defaultdict(dict)
        for figure in ("wall-clock", "modeled"):
            chosen = {role: {t: best_run(tasks[t], runs[t][role], figure) for t in runs}
                      for role in (claim.faster, claim.slower)}
            for task, recs in [*((t, tasks[t]) for t in runs), (POOLED, pooled)]:
                pick = {role: c if task == POOLED else {task: c[task]} for role, c in chosen.items()}
                compared = relabeled(recs, pick[claim.slower], "slower") + relabeled(recs, pick[claim.faster], "faster")
                r = rank(compared, "slower", "faster")
                ratio = r.wall_ratio if figure == "wall-clock" else r.modeled_ratio
                cells[task].update({
                    f"runs {figure}": _runs(pick[claim.faster]) + " vs " + _runs(pick[claim.slower]),
                    f"ratio {figure}": ratio, f"verdict {figure}": verdict(figure, ratio, r.wall_ci),
                    "prompts": r.prompts, **({"wall CI95": r.wall_ci} if figure == "wall-clock" else {})})
        rows += [{"claim": claim.id, "source": claim.source, "paper": claim.paper, "task": t, **c}
                 for t, c in cells.items()]
    return rows


def _runs(chosen: dict[str, str]) -> str:
    """The run chosen per task, once if every task chose the same."""
    keys = sorted(set(chosen.values()))
    return keys[0] if len(keys) == 1 else "/".join(f"{t}:{k}" for t, k in sorted(chosen.items()))


def claims_summary(rows: list[dict]) -> list[dict]:
    """Per claim and figure: the pooled verdict, then the per-task verdicts counted, e.g.
    "holds (tasks: 2 holds, 1 inside noise)"."""
    out = []
    for claim in CLAIMS:
        mine = [r for r in rows if r["claim"] == claim.id]
        pooled = next(r for r in mine if r["task"] == POOLED)
        tasks = [r for r in mine if r["task"] != POOLED]
        row = {"claim": claim.id, "source": claim.source, "paper": claim.paper}
        for figure in ("wall-clock", "modeled"):
            counts = Counter(r[f"verdict {figure}"] for r in tasks)
            per_task = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
            row[figure] = pooled[f"verdict {figure}"] + (f" (tasks: {per_task})" if tasks else "")
        out.append(row)
    return out


def format_claims(rows: list[dict]) -> str:
    """The claims table: per claim and task, the ratio and verdict under each figure."""
    head = (f"{'claim':<5} {'task':<10} {'n':>3} {'wall':>7} {'wall CI95':>15} {'verdict':<13} {'modeled':>8} "
            f"{'verdict':<8} runs (wall-clock choice)")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["verdict wall-clock"] == "not run":
            lines.append(f"{r['claim']:<5} {r['task']:<10} {'':>3} not run: {r['paper']}")
            continue
        ci = r["wall CI95"]
        ci = f"{'-':>15}" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]".rjust(15)
        lines.append(f"{r['claim']:<5} {r['task']:<10} {r['prompts']:>3} {r['ratio wall-clock']:>6.3f}x {ci} "
                     f"{r['verdict wall-clock']:<13} {r['ratio modeled']:>7.3f}x {r['verdict modeled']:<8} "
                     f"{r['runs wall-clock']}")
    lines.append("claims: " + "; ".join(f"{c.id} {c.paper} ({c.source})" for c in CLAIMS))
    lines.append("wall: TPS ratio faster/slower run, paired per prompt; holds/fails when its bootstrap interval "
                 "excludes 1.0, else inside noise; modeled: the deterministic ratio under the cost profile")
    return "\n".join(lines)
