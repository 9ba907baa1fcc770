"""The workbook's two cost regimes, this machine's and the paper's, and the paper's items drawn in each.

At T = 0 a decode's rounds (trees, accepted lengths) do not depend on the machine; the seconds do,
and so do the decisions that read them (SABA's budget, CaDDTree's stopping, which fixed budget is
best). A `Regime` is what decides and prices the rounds:
  machine  the shipped CPU calibration and cost profile (`cost_profile.default_profile`); budgets of
           a CPU's order; every decode verified and timed: wall clock beside the modeled figure;
  paper    the paper's A100 round costs (`graftlib/assets/costs/paper-a100.json`, derived from its
           tables by `graftlib.lab.report.paper_costs`) and SABA's gain on the paper's grid under them
           (`graftlib/assets/saba/paper-a100.json`); budgets of the paper's order (DDTree 64-256,
           caps 512); the DFlash-drafted runs walked along AR's tokens (`graftlib.core.ar_path`:
           the verified decode's rounds without its verify), so the figures are modeled only.
`regime_runs` lists a regime's runs of Tables 1-2 (the chain, DDTree at the regime's budgets,
+TDES, +SABA, GRAFT, CaDDTree, EAGLE-3 / OPT-Tree at their releases' budgets) and `regime_records`
runs them over tasks into one file per regime, which the Table 1, Table 2, Figure 1(b) and
paper_regime notebooks share (same parameters, same setting: one decodes, the others read).
From those records: `regime_table` (Tables 1-2: nodes, MAT, speedups beside the paper's GSM8K
numbers), `mismatch_table` (Figure 1(b)), `needed_mat_line` (the MAT GRAFT would need for the
paper's speedup, `paper_costs.mat_needed`) and `claims_by_regime` (the throughput claims C1-C9 of
`graftlib.lab.report.claims`, a verdict per regime and figure: the machine's by wall clock and modeled,
the paper regime's modeled only). Sweeps of their own: `regime_transfer` (Figure 5: each TDES
scorer against DDTree), `regime_betas` (Table 3: GRAFT per beta), `regime_budget_curve` (Figure
1(c)) and `regime_oracle` (Figure 6), the last two same-prefix replays (walked and priced by the
regime's profile where it walks). `figure_claims` gives those items' claims (F1b, F1c, F5, F6, T3)
in the shape of `claims_by_regime`.
"""

from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from graftlib.core.errors import require
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
from graftlib.lab.report.paper import FIGURE6, TABLE1, TABLE2, TABLE3
from graftlib.lab.report.paper_costs import MODEL, PROFILE_NAME, mat_needed, method_errors
from graftlib.lab.report.tables import budget_curve
from graftlib.lab.run.bench import Run, run_bench, task_prompts
from graftlib.lab.run.machine_costs import deciding
from graftlib.lab.run.strength import STRENGTH_PATH, strengths
from graftlib.methods.cost_profile import PAPER_PROFILE, CostProfile, default_profile, with_costs
from graftlib.methods.registry import AR_METHODS, REGISTRY
from graftlib.methods.saba_params import PAPER_PATH, SabaParams, default_params
from graftlib.training.graft.replay import (
    oracle_rows,
    priced,
    records_of,
    replay_prompts,
    round_prompts,
    within_grid,
)

LABELS = {"ar": "AR", "dflash": "DFlash", "ddtree": "DDTree", "ddtree+tdes": "+TDES", "ddtree+saba": "+SABA",
          "graft": "GRAFT", "caddtree": "CaDDTree", "eagle3": "EAGLE-3", "opt-tree": "OPT-Tree"}


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

    def pair_for(self, pair, task: str):
        """`pair` as this regime drafts `task` with: at the task's calibrated strength where the regime has one."""
        if self.strength is None:
            return pair
        require(task in self.strength, f"the {self.name} regime has no calibrated drafter strength for {task!r} "
                f"(calibrated: {', '.join(self.strength)}): run `graft calibrate-strength --tasks {task}`")
        return pair.with_strength(*self.strength[task])

    @property
    def suffix(self) -> str:
        """The regime's part of a figure's file name: "" on this machine, "_paper", "_paper_acceptance"."""
        return "" if self.name == "machine" else "_" + self.name.replace("+", "_")

    @property
    def turns(self) -> str:
        """The prompts' turns: a walked decode takes one (`bench.decode_prompt`), a verified one all."""
        return "1" if self.walk else "all"


def _middle(budgets) -> int:
    return tuple(budgets)[len(budgets) // 2]


def machine(budgets=(4, 8, 16), cap: int = 64, chains=(3, 15), budget: int | None = None,
            profile: CostProfile | None = None) -> Regime:
    """This machine's regime; `profile` prices the rounds and the adaptive methods decide with it (default: the
    shipped CPU one; a notebook passes `machine_costs.machine_profile(pair)`), `budget` defaults to the middle of
    `budgets`."""
    profile = profile or default_profile()
    return Regime("machine", "this machine: measured and modeled", profile, deciding(None, profile),
                  tuple(budgets), budget or _middle(budgets), cap, tuple(chains), False)


def paper(budgets=(64, 128, 256), cap: int = 512, budget: int | None = None) -> Regime:
    profile = CostProfile.load(PAPER_PROFILE)
    return Regime("paper", "the paper's A100 costs: modeled", profile, with_costs(SabaParams.load(PAPER_PATH), profile),
                  tuple(budgets), budget or _middle(budgets), cap, (15,), True)


def paper_acceptance(budgets=(64, 128, 256), cap: int = 512, budget: int | None = None,
                     strength_path: str | Path = STRENGTH_PATH) -> Regime:
    """The paper's costs and acceptance: the paper regime with the DFlash drafter at the strength calibrated per
    task to the paper's chain MAT (`graftlib.lab.run.strength`), a construction; EAGLE-3 / OPT-Tree keep the real
    drafter. Modeled only."""
    base = paper(budgets, cap, budget)
    return replace(base, name="paper+acceptance", label="the paper's A100 costs and acceptance (a construction): "
                   "modeled", strength=strengths(strength_path))


def pick(names: str, regimes: dict[str, Regime], required: str | None = None) -> dict[str, Regime]:
    """The regimes named in the comma list `names` (a notebook's `regime_names` parameter), in `regimes`' order;
    a one-line error on an unknown name or without `required`."""
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    for n in chosen:
        require(n in regimes, f"parameter regime_names: unknown regime {n!r}; choose from {', '.join(regimes)}")
    require(chosen and (required is None or required in chosen),
            f"parameter regime_names={names!r}: name {required or 'a regime'} among them")
    return {n: r for n, r in regimes.items() if n in chosen}


def named(names: str, costs: CostProfile | None = None, budgets=(4, 8, 16), cap: int = 64, chains=(3, 15),
          budget: int | None = None, paper_budgets=(64, 128, 256), paper_cap: int = 512,
          required: str = "machine") -> dict[str, Regime]:
    """The regimes a notebook's `regime_names` parameter names (`pick`), built from its budgets: this machine's
    (priced and decided by `costs`), the paper's costs, the paper's costs and acceptance."""
    builders = {"machine": lambda: machine(budgets, cap, chains, budget, costs),
                "paper": lambda: paper(paper_budgets, paper_cap),
                "paper+acceptance": lambda: paper_acceptance(paper_budgets, paper_cap)}
    return {name: builders[name]() for name in pick(names, dict.fromkeys(builders), required)}


def regime_runs(regime: Regime, ar_drafted: bool = True) -> list[Run]:
    """Tables 1-2's runs in `regime` (module doc); `ar_drafted=False` leaves EAGLE-3 / OPT-Tree out (a pair
    without an EAGLE-3 drafter)."""
    fixed = sorted({*regime.budgets, regime.budget})
    runs = [Run("ar", None), *(Run("dflash", c) for c in regime.chains), *(Run("ddtree", b) for b in fixed),
            Run("ddtree+tdes", regime.budget), *(Run(m, regime.cap) for m in ("ddtree+saba", "graft", "caddtree"))]
    return runs + ([Run(m, REGISTRY[m].release_budget) for m in AR_METHODS] if ar_drafted else [])


def regime_bench(pair, regime: Regime, prompts: list, runs: list[Run], max_new_tokens: int, out,
                 progress: bool = False, tdes: str | None = None, beta: float | None = None) -> list[dict]:
    """`run_bench` deciding and priced in `regime` (walked where the regime walks), keyed by the regime (and the
    drafter strength where it has one: the prompts are one task's)."""
    extra = {"regime": regime.name}
    if regime.strength is not None:
        tasks = {p.task for p in prompts}
        require(len(tasks) == 1, f"the {regime.name} regime benches one task at a time, got {sorted(tasks)}")
        pair = regime.pair_for(pair, tasks.pop())
        extra.update(strength=pair.drafter.s, tau=pair.drafter.tau)
    return run_bench(pair, prompts, runs, max_new_tokens, out, progress=progress, extra=extra,
                     tdes=tdes, beta=beta, cost_profile=regime.profile, saba=regime.saba, walk=regime.walk)


def tasks_bench(pair, regime: Regime, tasks: list[str], n_prompts: int, runs: list[Run], max_new_tokens: int, out,
                **kwargs) -> list[dict]:
    records = []
    for task in tasks:
        prompts = task_prompts(pair, task, n_prompts, turns=regime.turns)
        records += regime_bench(pair, regime, prompts, runs, max_new_tokens, out, **kwargs)
    return records


def regime_records(pair, regime: Regime, tasks: list[str], n_prompts: int, max_new_tokens: int, results_dir,
                   ar_drafted: bool = True, progress: bool = False) -> list[dict]:
    """Tables 1-2's runs (`regime_runs`) in `regime` on the first `n_prompts` eval prompts of each task: the one
    bench of a regime that the Table 1, Table 2, Figure 1(b) and paper_regime notebooks share. They pass the
    same parameters, so the setting and the file (`<results_dir>/regime_<name>.jsonl`) are the same and a
    notebook finds the records an earlier one decoded (`run_bench` resumes by setting, prompt and run). A
    regime with a drafter strength takes EAGLE-3 / OPT-Tree (which do not draft with that drafter) from
    `ar_drafted_records`, shared with the strength axis."""
    if regime.strength is None:
        return tasks_bench(pair, regime, tasks, n_prompts, regime_runs(regime, ar_drafted), max_new_tokens,
                           Path(results_dir) / f"regime_{regime.name}.jsonl", progress=progress)
    records = tasks_bench(pair, regime, tasks, n_prompts, regime_runs(regime, False), max_new_tokens,
                          Path(results_dir) / f"regime_{regime.name}.jsonl", progress=progress)
    return records + (ar_drafted_records(pair, regime, tasks, n_prompts, max_new_tokens, results_dir, progress)
                      if ar_drafted else [])


def ar_drafted_records(pair, regime: Regime, tasks: list[str], n_prompts: int, max_new_tokens: int, results_dir,
                       progress: bool = False) -> list[dict]:
    """EAGLE-3 / OPT-Tree at their releases' budgets with the pair's real drafter, decided and priced in `regime`
    without its drafter strength, one bench (`<results_dir>/regime_ar_drafted_<profile>.jsonl`) for every regime
    and strength that shares the profile: their records (AR's stay in the bench file)."""
    base = replace(regime, name="ar-drafted", strength=None)
    runs = [Run("ar", None), *(Run(m, REGISTRY[m].release_budget) for m in AR_METHODS)]
    records = tasks_bench(pair, base, tasks, n_prompts, runs, max_new_tokens,
                          Path(results_dir) / f"regime_ar_drafted_{regime.profile.name}.jsonl", progress=progress)
    return [r for r in records if r["method"] in AR_METHODS]


def _reduction(rate: float, base: float) -> float:
    """The mismatch reduction against `base` in percent; nan where the base has no mismatch to reduce."""
    return 100 * (1 - rate / base) if base else float("nan")


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
            row[f"{label} reduction %"] = _reduction(row[label], row["DDTree"])
        rows[task] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("task")


def regime_transfer(pair, regime: Regime, tasks: list[str], n_prompts: int, max_new_tokens: int, out,
                    scorers: dict[str, str | None]):
    """Figure 5 in `regime`: DDTree against +TDES at the regime's fixed budget on `tasks`, once per TDES scorer
    (name -> path; None: the shipped default): per task and scorer the mismatch reduction against DDTree and
    TPS / DDTree, modeled (and measured where the regime verifies). A pandas DataFrame indexed by task with
    (figure, scorer) columns."""
    import pandas as pd

    runs = [Run("ar", None), Run("ddtree", regime.budget), Run("ddtree+tdes", regime.budget)]
    cols = {"mismatch reduction %": None, "modeled TPS / DDTree": "modeled_tokens_per_s"}
    if not regime.walk:
        cols["TPS / DDTree"] = "tokens_per_s"
    frames = {}
    for scorer, path in scorers.items():
        recs = tasks_bench(pair, regime, tasks, n_prompts, runs, max_new_tokens, out, tdes=path)
        rows = {}
        for task, task_recs in by_task(recs).items():
            s = {row["method"]: row for row in summarize(task_recs)}
            base, td = s["ddtree"], s["ddtree+tdes"]
            rows[task] = {name: (_reduction(td["mismatch_rate"], base["mismatch_rate"]) if field is None
                                 else td[field] / base[field]) for name, field in cols.items()}
        frames[scorer] = pd.DataFrame.from_dict(rows, orient="index")
    F = pd.concat(frames, axis=1).swaplevel(axis=1)  # columns (figure, scorer)
    return F.sort_index(axis=1, level=0, sort_remaining=False).rename_axis("task")


def regime_betas(pair, regime: Regime, task: str, n_prompts: int, max_new_tokens: int, out, betas: list[float]):
    """Table 3 in `regime`: GRAFT at the regime's cap on `task` for each TDES weight beta (beta = 0: DDTree's
    edge scores with SABA), each beta its own setting with its own AR: MAT, modeled TPS and speedup (measured
    too where the regime verifies), mismatch rate and its reduction against beta = 0, beside the paper's
    row. A pandas DataFrame indexed by beta."""
    import pandas as pd

    rows = {}
    for beta in betas:
        recs = tasks_bench(pair, regime, [task], n_prompts, [Run("ar", None), Run("graft", regime.cap)],
                           max_new_tokens, out, beta=beta)
        s = next(row for row in summarize(recs) if row["method"] == "graft")
        rows[beta] = {"MAT": s["mat"], "nodes/round": s["mean_nodes"], "modeled TPS": s["modeled_tokens_per_s"],
                      "speedup modeled": s["modeled_speedup"], "mismatch": s["mismatch_rate"],
                      **({} if regime.walk else {"TPS": s["tokens_per_s"], "speedup wall": s["speedup"]}),
                      "ties": s["ties"], "mismatches": s["mismatches"]}
    T = pd.DataFrame.from_dict(rows, orient="index").rename_axis("beta")
    base = T["mismatch"].get(0.0, float("nan"))
    T["mismatch reduction %"] = 100 * (1 - T["mismatch"] / base) if base else float("nan")
    for i, name in enumerate(("paper MAT", "paper TPS", "paper reduction %")):
        T[name] = [TABLE3.get(b, (None,) * 3)[i] for b in T.index]
    return T


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
    import pandas as pd

    table = {c.id: {"source": c.source, "paper": c.paper} for c in CLAIMS}
    for name, recs in records.items():
        regime = regimes[name]
        rows = [r for r in regime_claims(recs, regime) if r["task"] == POOLED]
        for r in rows:
            for figure in _figures(regime):
                table[r["claim"]][f"{name} {figure}"] = verdict_cell(r, figure)
            table[r["claim"]][f"{name} counts"] = counts_text(r)
    return pd.DataFrame.from_dict(table, orient="index")


def regime_budget_curve(pair, regime: Regime, items: list, max_new_tokens: int, grid: list[int], out):
    """Figure 1(c) in `regime`: a DDTree trajectory at the grid's largest budget replayed over `grid` (walked and
    priced by the regime's profile where it walks, `replay.WalkReplay`), as `tables.budget_curve`; on this
    machine the same replay as the Figure 1(c) notebook's."""
    lines = replay_prompts(regime.pair_for(pair, items[0].task), "ddtree", max(grid), grid, items, max_new_tokens, out,
                           profile=regime.profile if regime.walk else None)
    return budget_curve(records_of(lines), grid, regime.profile)


def regime_oracle(pair, regime: Regime, items: list, max_new_tokens: int, grid: list[int], out,
                  repeats: int = 1) -> dict[str, list]:
    """Figure 6 in `regime`: GRAFT's trajectory (capped at the grid's largest budget) replayed over `grid`,
    SABA choosing within it (`replay.within_grid`); where the regime verifies, each (round, budget) timed
    `repeats` times (the median kept). {figure: per-round oracle rows (`replay.oracle_rows`)}: "modeled" (the
    records priced by the regime's profile) and, where the regime verifies, "wall-clock" (the measured
    latencies)."""
    params = within_grid(regime.saba or default_params(), grid)
    lines = replay_prompts(regime.pair_for(pair, items[0].task), "graft", max(grid), grid, items, max_new_tokens, out,
                           params,
                           repeats=1 if regime.walk else repeats, profile=regime.profile if regime.walk else None)
    records, prompt = records_of(lines), round_prompts(lines)
    rows = {"modeled": oracle_rows(priced(records, regime.profile))}
    if not regime.walk:
        rows = {"wall-clock": oracle_rows(records), **rows}
    return {figure: [dict(r, prompt=prompt[r["round"]]) for r in rs] for figure, rs in rows.items()}


def against_fixed(rows: list[dict]) -> dict:
    """Figure 6's rows (`regime_oracle`) against one budget every round: SABA's mean retained oracle
    throughput, the best fixed budget's chosen after the fact (and its mean), SABA / best fixed pooled over
    rounds with its bootstrap interval over prompts (rows without `prompt` count as one prompt), and the
    prompts."""
    budgets = sorted(set.intersection(*(set(r["fixed"]) for r in rows))) if rows else []
    require(budgets, "Figure 6: no budget was replayed in every round")
    fixed = {b: sum(r["fixed"][b] for r in rows) / len(rows) for b in budgets}
    best = max(fixed, key=fixed.get)
    per_prompt = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        per_prompt[r.get("prompt", 0)][0] += r["retained"]
        per_prompt[r.get("prompt", 0)][1] += r["fixed"][best]
    saba = sum(r["retained"] for r in rows) / len(rows)
    num, den = zip(*per_prompt.values())
    return {"saba": saba, "best_fixed_budget": best, "best_fixed": fixed[best], "fixed": fixed,
            "ratio": saba / fixed[best], "ci": ratio_ci(list(num), list(den)), "prompts": len(per_prompt)}


FIGURE_CLAIMS = {
    "F1b": ("Figure 1(b)", "GRAFT consistently reduces the parent-child mismatch rate over DDTree across tasks"),
    "F1c": ("Figure 1(c)", "the throughput-optimal budget differs between easy and hard rounds"),
    "F5": ("Figure 5", "a TDES scorer trained on GSM8K only reduces mismatch and raises TPS / DDTree on every task"),
    "F6": ("Figure 6", f"SABA retains {FIGURE6['mean_retained']:.1%} of the same-prefix oracle's throughput"),
    "F6b": ("Figure 6", "SABA's per-round budgets beat the best fixed budget (chosen after the fact)"),
    "T3": ("Table 3", "beta = 0.2 gives the highest TPS of beta in {0, 0.05, 0.1, 0.2, 0.4}"),
}
FIGURE_NOTES = {  # what a verdict of the item tests beyond its words
    "F1b": "direction per task (mismatch pooled over rounds: no interval); mixed tasks: inside noise",
    "F1c": "easy rounds' best budget above the hard rounds' (the paper's picture); equal: inside noise",
    "F5": "on tasks the scorer never saw (GSM8K left out); mixed tasks: inside noise",
    "F6": "direction: F6b's; size: the paper's mean. Where SABA decides with the same cost model that prices the "
          "oracle, it tests SABA's gain prediction only",
    "F6b": "SABA / best fixed budget, mean retained share, 95% bootstrap interval over prompts",
    "T3": "direction: the best TPS at some beta > 0 (TDES helps); size: at beta = 0.2; no interval",
}
GSM8K_SCORER = "gsm8k-only"  # Figure 5's scorer name for the one trained on GSM8K traces only


def _figures(regime: Regime) -> tuple[str, ...]:
    return ("modeled",) if regime.walk else ("wall-clock", "modeled")


def _qualitative(ok: bool, opposite: bool, tested: bool) -> str:
    """A claim without an interval: reproduced where every unit agrees, opposite where every one disagrees."""
    return "not tested" if not tested else "reproduced" if ok else "opposite" if opposite else "inside noise"


def _transfer_cell(F, figure: str, tested: bool) -> str:
    F = F.drop(index="gsm8k", errors="ignore")  # the GSM8K-only scorer's own task: never a test of transfer
    if F.empty:
        return "not tested (no task besides GSM8K)"
    red = F[("mismatch reduction %", GSM8K_SCORER)]
    tps = F[("TPS / DDTree" if figure == "wall-clock" else "modeled TPS / DDTree", GSM8K_SCORER)]
    v = _qualitative(bool((red > 0).all() and (tps > 1).all()), bool((tps < 1).all()), tested)
    return f"{v} (TPS / DDTree {tps.min():.3f}-{tps.max():.3f} on {', '.join(F.index)})"


def figure_claims(regimes: dict[str, Regime], curves: dict | None = None, oracles: dict | None = None,
                  mismatch: dict | None = None, transfer: dict | None = None, betas: dict | None = None,
                  n_prompts: int = 0, max_new_tokens: int = 0, min_prompts: int = MIN_PROMPTS):
    """The paper's figure and Table 3 claims (`FIGURE_CLAIMS`) per regime and figure, as rows shaped like
    `claims_by_regime`'s (verdicts of `graftlib.lab.report.claims`, `not tested` under `min_prompts` prompts a task;
    `FIGURE_NOTES` says what each tests); each argument is {regime name: that item's table} and an item left
    out (None) is left out of the rows:
      F1b  `mismatch` (`mismatch_table`): GRAFT's mismatch rate below DDTree's on every task;
      F1c  `curves` (`tables.budget_curve`): the easy third's best budget above the hard third's;
      F5   `transfer` (`regime_transfer`): the GSM8K-only scorer's mismatch reduction > 0 and TPS / DDTree
           > 1 on every task it was not trained on;
      F6   `oracles` (`regime_oracle`): F6b's direction, and SABA's mean retained share at the paper's;
      F6b  `oracles`: SABA above the best fixed budget (`against_fixed`), with its interval;
      T3   `betas` (`regime_betas`): the highest TPS at some beta > 0, at beta = 0.2 for the size.
    A walked regime has the modeled figure only."""
    import pandas as pd

    items = {"F1b": mismatch, "F1c": curves, "F5": transfer, "F6": oracles, "F6b": oracles, "T3": betas}
    table = {k: {"source": src, "paper": words, "tests": FIGURE_NOTES[k]} for k, (src, words) in FIGURE_CLAIMS.items()
             if items[k] is not None}
    tested = n_prompts >= min_prompts

    def counts(tasks: int) -> str:
        return count_text(tasks, n_prompts, max_new_tokens)

    for name, regime in regimes.items():
        for figure in _figures(regime):
            col = f"{name} {figure}"
            if mismatch is not None and name in mismatch:
                red = mismatch[name]["GRAFT reduction %"]
                v = _qualitative(bool((red > 0).all()), bool((red < 0).all()), tested)
                table["F1b"][col] = f"{v} (reduction {red.min():.0f}% to {red.max():.0f}%)"
                table["F1b"][f"{name} counts"] = counts(len(red))
            if curves is not None and name in curves:
                column = "tps" if figure == "wall-clock" else "m_tps"
                best = curves[name][column].groupby(level=0, observed=True).idxmax().map(lambda x: x[1])
                easy, hard = best.get("easy"), best.get("hard")
                v = _qualitative(easy > hard, easy < hard, tested)
                table["F1c"][col] = f"{v} (easy B={easy}, hard B={hard})"
                table["F1c"][f"{name} counts"] = counts(1)
            if transfer is not None and name in transfer:
                table["F5"][col] = _transfer_cell(transfer[name], figure, tested)
                table["F5"][f"{name} counts"] = counts(len(transfer[name].drop(index="gsm8k", errors="ignore")))
            if oracles is not None and name in oracles and figure in oracles[name]:
                f = against_fixed(oracles[name][figure])
                direction = sized_verdict(f["ratio"], f["ci"], 1.0, f["prompts"] if tested else 0,
                                          min_prompts=min_prompts)
                ci = f" [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]" if f["ci"] else ""
                table["F6b"][col] = (f"{direction} (SABA / best fixed B={f['best_fixed_budget']}: {f['ratio']:.3f}x{ci}; "
                                     f"{f['saba']:.1%} vs {f['best_fixed']:.1%})")
                size = f["saba"] >= FIGURE6["mean_retained"]
                v = direction if direction != "reproduced" else "reproduced" if size else "direction only"
                table["F6"][col] = f"{v} ({f['saba']:.1%} vs the paper's {FIGURE6['mean_retained']:.1%})"
                for k in ("F6", "F6b"):
                    table[k][f"{name} counts"] = counts(1)
            if betas is not None and name in betas:
                tps = betas[name]["TPS" if figure == "wall-clock" else "modeled TPS"]
                best = tps.idxmax()
                v = "not tested" if not tested else "opposite" if best == 0 else \
                    "reproduced" if best == 0.2 else "direction only"
                table["T3"][col] = f"{v} (best beta {best:g})"
                table["T3"][f"{name} counts"] = counts(1)
    return pd.DataFrame.from_dict(table, orient="index")
