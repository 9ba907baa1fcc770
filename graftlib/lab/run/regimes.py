"""The workbook's cost regimes built from a notebook's parameters, and the runs and sweeps of each.

At T = 0 a decode's rounds (trees, accepted lengths) do not depend on the machine; the seconds do,
and so do the decisions that read them (SABA's budget, CaDDTree's stopping, which fixed budget is
best). The regimes (`graftlib.lab.report.regime_tables.Regime`):
  machine           this machine's costs (shipped, or measured: `machine_costs`) deciding and pricing;
                    budgets of a CPU's order; every decode verified and timed;
  paper             the paper's A100 round costs (`graftlib/assets/costs/paper-a100.json`) and SABA's
                    gain on the paper's grid under them; budgets of the paper's order; the DFlash-drafted
                    runs walked along AR's tokens (`graftlib.core.ar_path`): modeled only;
  paper+acceptance  the paper regime with the DFlash drafter at the strength calibrated per task to the
                    paper's chain MAT (`graftlib.models.strength`, a construction; modeled only), `own-spine`;
  paper+pinned      the same with the `pinned` calibration (the paper's tree gain too), and paper+true-path
                    with `true-path` (`ACCEPTANCE_REGIMES`).
`named` builds the ones a notebook's `regime_names` names. `regime_records` runs Tables 1-2's runs
(`regime_runs`) over tasks into one file per regime, which the Table 1, Table 2, Figure 1(b) and
paper_regime notebooks share (same parameters, same setting: one decodes, the others read). Sweeps:
`regime_transfer` (Figure 5), `regime_betas` (Table 3), `regime_budget_curve` (Figure 1(c)) and
`regime_oracle` (Figure 6), the last two same-prefix replays (walked and priced by the regime's profile
where it walks).
"""

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.paths import portable
from graftlib.inputs.artifacts import ShippedAssets
from graftlib.inputs.cost_profile import PAPER_PROFILE, CostProfile, default_profile, with_costs
from graftlib.lab.report.regime_tables import GSM8K_SCORER, Regime
from graftlib.lab.report.tables import beta_table, budget_curve, transfer_table
from graftlib.lab.run.bench import BenchSpec, Run, run_bench, task_prompts
from graftlib.lab.run.costs.machine_costs import deciding
from graftlib.methods.registry import AR_METHODS, REGISTRY, SHIPPED_INPUTS, MethodInputs
from graftlib.methods.saba_params import SabaParams, default_params
from graftlib.models.strength import TaskStrengths, strength_file
from graftlib.training.graft.replay import (
    ReplaySpec,
    oracle_rows,
    priced,
    records_of,
    replay_prompts,
    round_prompts,
    within_grid,
)

PAPER_TABLE2_BUDGET = 128  # DDTree's and +TDES's budget under the paper's costs (its Table 2: 110 nodes a round)


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


def paper(budgets=(8, 16, 32, 64, 128, 256), cap: int = 512, budget: int | None = None) -> Regime:
    """The paper's A100 costs; `budget` (+TDES's, Table 2's DDTree) defaults to `PAPER_TABLE2_BUDGET` where
    `budgets` has it, else their middle."""
    profile = CostProfile.load(PAPER_PROFILE)
    budget = budget or (PAPER_TABLE2_BUDGET if PAPER_TABLE2_BUDGET in budgets else _middle(budgets))
    return Regime("paper", "the paper's A100 costs: modeled", profile,
                  with_costs(SabaParams.load(ShippedAssets().saba_paper), profile),
                  tuple(budgets), budget, cap, (15,), True)


ACCEPTANCE_REGIMES = {"paper+acceptance": "own-spine", "paper+pinned": "pinned", "paper+true-path": "true-path"}
# the third regime per drafter-strength calibration (`models.strength.CALIBRATIONS`): the same costs and chain
# acceptance, the tree's gain over the chain as each calibration gives it; `paper+acceptance` is the first drawn


def paper_acceptance(budgets=(8, 16, 32, 64, 128, 256), cap: int = 512, budget: int | None = None,
                     calibration: str = "own-spine", assets: ShippedAssets | None = None) -> Regime:
    """The paper's costs and acceptance: the paper regime with the DFlash drafter at the strength calibrated per
    task to the paper's chain MAT (`graftlib.lab.run.strength`; `calibration`: a shipped calibration's name), a
    construction, and GRAFT's parts fitted on that construction (`graft prepare --strength NAME --ship`: the TDES
    scorers and SABA's calibration shipped as `artifacts.acceptance_name(calibration)`); EAGLE-3 / OPT-Tree keep the
    real drafter. Named by `ACCEPTANCE_REGIMES`. Modeled only."""
    name = next((n for n, c in ACCEPTANCE_REGIMES.items() if c == calibration), None)
    require(name is not None, f"unknown drafter-strength calibration {calibration!r} for the third regime: the names "
            f"are {', '.join(ACCEPTANCE_REGIMES.values())}")
    base, assets = paper(budgets, cap, budget), assets or ShippedAssets()
    scorers = {k: str(v) for k, v in assets.acceptance_scorers(calibration).items()}
    saba = assets.saba_acceptance(calibration)
    missing = [portable(p) for p in (strength_file(calibration), saba, *scorers.values()) if not Path(p).is_file()]
    require(not missing, f"the {name} regime's parts are missing ({', '.join(missing)}): make them with `graft "
            f"calibrate-strength` (docs/strength.md), then `graft prepare --strength {calibration} --task-scorers "
            "gsm8k --ship`")
    return replace(base, name=name, label=f"the paper's A100 costs and acceptance (a construction, {calibration}): "
                   "modeled", strength=TaskStrengths(calibration).table, tdes=scorers,
                   saba=with_costs(SabaParams.load(saba), base.profile))


def pick(names: str, regimes: dict[str, Regime], required: str | None = None) -> dict[str, Regime]:
    """The regimes named in the comma list `names` (a notebook's `regime_names` parameter), in `regimes`' order;
    a one-line error on an unknown name or without `required`."""
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    for n in chosen:
        require(n in regimes, f"parameter regime_names: unknown regime {n!r}; choose from {', '.join(regimes)}")
    require(chosen and (required is None or required in chosen),
            f"parameter regime_names={names!r}: name {required or 'a regime'} among them")
    return {n: r for n, r in regimes.items() if n in chosen}


@dataclass(frozen=True)
class RegimeBudgets:
    """A notebook's budgets for its regimes: this machine's fixed `budgets`, adaptive `cap`, DFlash `chains` and
    +TDES's `budget` (None: the middle of `budgets`); the paper regimes' fixed `paper_budgets` and `paper_cap`."""

    budgets: tuple[int, ...] = (4, 8, 16)
    cap: int = 64
    chains: tuple[int, ...] = (3, 15)
    budget: int | None = None
    paper_budgets: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    paper_cap: int = 512


def named(names: str, costs: CostProfile | None = None, sizes: RegimeBudgets = RegimeBudgets(),
          required: str = "machine") -> dict[str, Regime]:
    """The regimes a notebook's `regime_names` parameter names (`pick`), built from its budgets `sizes`: this
    machine's (priced and decided by `costs`), the paper's costs, the paper's costs and acceptance under each
    drafter-strength calibration (`ACCEPTANCE_REGIMES`)."""
    s = sizes
    builders = {"machine": lambda: machine(s.budgets, s.cap, s.chains, s.budget, costs),
                "paper": lambda: paper(s.paper_budgets, s.paper_cap),
                **{name: partial(paper_acceptance, s.paper_budgets, s.paper_cap, calibration=c)
                   for name, c in ACCEPTANCE_REGIMES.items()}}
    return {name: builders[name]() for name in pick(names, dict.fromkeys(builders), required)}


def regime_runs(regime: Regime, ar_drafted: bool = True) -> list[Run]:
    """Tables 1-2's runs in `regime` (module doc); `ar_drafted=False` leaves EAGLE-3 / OPT-Tree out (a pair
    without an EAGLE-3 drafter)."""
    fixed = sorted({*regime.budgets, regime.budget})
    runs = [Run("ar", None), *(Run("dflash", c) for c in regime.chains), *(Run("ddtree", b) for b in fixed),
            Run("ddtree+tdes", regime.budget), *(Run(m, regime.cap) for m in ("ddtree+saba", "graft", "caddtree"))]
    return runs + ([Run(m, REGISTRY[m].release_budget) for m in AR_METHODS] if ar_drafted else [])


def regime_bench(pair, regime: Regime, prompts: list, runs: list[Run], max_new_tokens: int, out,
                 progress: bool = False, inputs: MethodInputs = SHIPPED_INPUTS) -> list[dict]:
    """`run_bench` deciding and priced in `regime` (walked where the regime walks), keyed by the regime (and the
    drafter strength where it has one: the prompts are one task's). `inputs`: the TDES scorer (None: the regime's
    own where it has one, else the shipped default) and beta; the SABA calibration is always the regime's."""
    extra = {"regime": regime.name}
    if regime.strength is not None:
        tasks = {p.task for p in prompts}
        require(len(tasks) == 1, f"the {regime.name} regime benches one task at a time, got {sorted(tasks)}")
        pair = regime.pair_for(pair, tasks.pop())
        extra.update(pair.drafter.strength.setting())
    inputs = MethodInputs(inputs.tdes or regime.scorer(), inputs.beta, regime.saba)
    spec = BenchSpec(max_new_tokens, walk=regime.walk, cost_profile=regime.profile)
    return run_bench(pair, prompts, runs, out, spec, inputs, extra=extra, progress=progress)


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


def regime_transfer(pair, regime: Regime, tasks: list[str], n_prompts: int, max_new_tokens: int, out,
                    scorers: dict[str, str | None]):
    """Figure 5 in `regime`: DDTree against +TDES at the regime's fixed budget on `tasks`, once per TDES scorer
    (name -> path; None: the shipped default), as `tables.transfer_table` (ratios with intervals)."""
    runs = [Run("ar", None), Run("ddtree", regime.budget), Run("ddtree+tdes", regime.budget)]
    # the regime's own scorers where it has them (`Regime.scorer`)
    scorer_of = {scorer: regime.scorer(path, "gsm8k" if scorer == GSM8K_SCORER else None)
                 for scorer, path in scorers.items()}
    records = {scorer: tasks_bench(pair, regime, tasks, n_prompts, runs, max_new_tokens, out,
                                   inputs=MethodInputs(tdes)) for scorer, tdes in scorer_of.items()}
    return transfer_table(records, regime.walk)


def regime_betas(pair, regime: Regime, task: str, n_prompts: int, max_new_tokens: int, out, betas: list[float]):
    """Table 3 in `regime`: GRAFT at the regime's cap on `task` for each TDES weight beta, each beta its own
    setting with its own AR, as `tables.beta_table` (ratios to beta = 0 and 0.2 with intervals)."""
    runs = [Run("ar", None), Run("graft", regime.cap)]
    return beta_table({beta: tasks_bench(pair, regime, [task], n_prompts, runs, max_new_tokens, out,
                                         inputs=MethodInputs(beta=beta))
                       for beta in betas}, regime.walk)


def replay_spec(regime: Regime, grid: list[int], max_new_tokens: int, repeats: int = 1) -> ReplaySpec:
    """A replay over `grid` in `regime`: walked along AR's tokens and priced by its profile where it walks, else
    each (round, budget) timed `repeats` times."""
    if regime.walk:
        return ReplaySpec(tuple(grid), max_new_tokens, walk=True, profile=regime.profile)
    return ReplaySpec(tuple(grid), max_new_tokens, repeats)


def regime_budget_curve(pair, regime: Regime, items: list, max_new_tokens: int, grid: list[int], out):
    """Figure 1(c) in `regime`: a DDTree trajectory at the grid's largest budget replayed over `grid` (walked and
    priced by the regime's profile where it walks, `replay.WalkReplay`), as `tables.budget_curve`; on this
    machine the same replay as the Figure 1(c) notebook's."""
    lines = replay_prompts(regime.pair_for(pair, items[0].task), "ddtree", max(grid), items, out,
                           replay_spec(regime, grid, max_new_tokens))
    return budget_curve(records_of(lines), grid, regime.profile, round_prompts(lines))


def regime_replay(pair, regime: Regime, items: list, max_new_tokens: int, grid: list[int], out,
                  repeats: int = 1) -> list[dict]:
    """GRAFT's trajectory (capped at the grid's largest budget) replayed over `grid` in `regime`, SABA choosing within
    it (`replay.within_grid`): walked along AR's tokens where the regime walks, else each (round, budget) timed
    `repeats` times (the median kept). The replay's JSON lines (`replay.replay_prompts`; resumable in `out`)."""
    params = within_grid(regime.saba or default_params(), grid)
    spec = replay_spec(regime, grid, max_new_tokens, repeats)
    return replay_prompts(regime.pair_for(pair, items[0].task), "graft", max(grid), items, out, spec,
                          MethodInputs(regime.scorer(), saba=params))


def regime_oracle(pair, regime: Regime, items: list, max_new_tokens: int, grid: list[int], out,
                  repeats: int = 1) -> dict[str, list]:
    """Figure 6 in `regime` (`regime_replay`). {figure: per-round oracle rows (`replay.oracle_rows`)}: "modeled" (the
    records priced by the regime's profile) and, where the regime verifies, "wall-clock" (the measured
    latencies)."""
    lines = regime_replay(pair, regime, items, max_new_tokens, grid, out, repeats)
    records, prompt = records_of(lines), round_prompts(lines)
    rows = {"modeled": oracle_rows(priced(records, regime.profile))}
    if not regime.walk:
        rows = {"wall-clock": oracle_rows(records), **rows}
    return {figure: [dict(r, prompt=prompt[r["round"]]) for r in rs] for figure, rs in rows.items()}


