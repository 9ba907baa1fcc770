"""`graft calibrate`: fit SABA's cost (eq. 17) and gain (eq. 16) on this machine and save them.

Both models are fitted on the same data: same-prefix replay (`graftlib.training.graft.replay`) of reference
DDTree trajectories on validation prompts (never evaluation prompts) and the regular set's, over the budget
grid plus budget 0 (one plain AR step).

Cost: c and the AR step's `c_ar` jointly by non-negative least squares of the replayed rounds' latencies
(`saba_fit.fit_cost`), c0 plus the median draft time so C_t(B) is the whole round, `c_draft` that median;
by default a per-budget cost table of residuals (`--cost eq17` leaves it out) and the rows term.

Gain: (phi, alpha) by least squares on the replay's a_t(B) and s_t (`saba_fit.fit_gain`), by default with a
per-budget gain table (`--gain eq16`: the paper's model), and `hist_prior` the reference rounds' mean.

At T > 0 the reference trajectories sample (each prompt its own seed) and every budget of a round replays
with the round's random stream; the calibration records the sampling in `meta["sampling"]`.

The saved `SabaParams` records hardware, target, drafter, the pair's identity (checked on use), grid and fit
quality; its `id` hashes the numbers. `offline_tracking` scores any parameters on replay records (retained
oracle throughput of the budgets SABA would have picked).

Details: docs/internals.md, `graftlib.training.graft.calibrate`.
"""

import json
import math
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from graftlib.core.builders import FixedBudget, HeapTreeBuilder
from graftlib.core.errors import require
from graftlib.core.hardware import hardware_id
from graftlib.core.records import append_record, read_records, setting_id
from graftlib.core.sampling import GREEDY, Sampling, prompt_sampling
from graftlib.data.regular import VAL_COUNT as REGULAR_VAL
from graftlib.inputs.cli_args import add_model_args, add_sampling_args, sampling_from_args
from graftlib.inputs.cost_profile import CostProfile, load_profile, with_costs
from graftlib.methods.saba import BudgetGrid
from graftlib.methods.saba_extensions import GainCorrection, ar_utility
from graftlib.methods.saba_params import CPU_GRID, DEFAULT_PATH, SabaParams
from graftlib.models.strength import TaskStrengths, drafting_along
from graftlib.training.graft.replay import ReplayDecoder, ReplayRecord, ReplaySpec, WalkReplay, priced
from graftlib.training.graft.saba_fit import (
    calibration_meta,
    fit_cost,
    fit_cost_table,
    fit_gain,
    fit_gain_table,
    fit_rows_cost,
)

GAIN_MODELS = ("table", "eq16")
REGULAR_PROMPTS = 8  # of them replayed by default (`graft calibrate`, `graft prepare`)
COST_MODELS = ("table", "eq17")


def replay_rounds(pair, prompts: dict[str, list[int]], spec: ReplaySpec, ref_budget: int,
                  checkpoint: str | Path | None = None, setting: dict | None = None, before_prompt=None,
                  log=None) -> list[ReplayRecord]:
    """Replay records of reference ddtree@ref_budget trajectories of `prompts` (uid -> token ids) as `spec` says
    (`pair`: its target, drafter and eos ids); rounds numbered globally. At T > 0 each prompt replays with the seed
    `prompt_sampling(spec.sampling, uid)`. A walked spec walks the grid's a_t(B) untimed
    (`graftlib.training.graft.replay.WalkReplay`, T = 0) and prices them by its profile where it has one.
    `checkpoint`: a JSONL file that gets each prompt's records as it finishes (unpriced), keyed by its uid and
    `setting` (with the grid, budget, length and walk), so an interrupted replay goes on with the next prompt.
    `before_prompt(i, ids)`, when given, runs before prompt i replays (a drafter-strength construction follows
    its continuation there)."""
    cls = WalkReplay if spec.walk else ReplayDecoder
    dec = cls(pair.target, pair.drafter, HeapTreeBuilder(), FixedBudget(ref_budget), spec, pair.eos_ids)
    max_new_tokens, sampling = spec.max_new_tokens, spec.sampling
    sid = setting_id(**(setting or {}), grid=dec.grid, ref_budget=ref_budget, max_new_tokens=max_new_tokens,
                     walk=spec.walk, window=spec.window, hist_prior=spec.hist_prior, **sampling.setting())
    done = ({r["uid"]: r["records"] for r in read_records(checkpoint) if r.get("setting_id") == sid}
            if checkpoint else {})
    records: list[ReplayRecord] = []
    for i, (uid, ids) in enumerate(prompts.items()):
        if uid in done:
            mine = [ReplayRecord(**r) for r in done[uid]]
        else:
            if before_prompt is not None:
                before_prompt(i, ids)
            mine = dec.replay(ids, max_new_tokens, sampling=prompt_sampling(sampling, uid)).records
            if checkpoint:
                append_record(checkpoint, {"setting_id": sid, "uid": uid, "records": [r.to_dict() for r in mine]})
        if log:
            log(f"  prompt {i + 1}/{len(prompts)} {uid}: {sum(r.reference for r in mine)} rounds"
                + (" (from the checkpoint)" if uid in done else ""))
        base = 1 + max((r.round for r in records), default=-1)
        records += [replace(r, round=base + r.round) for r in mine]
    return priced(records, spec.profile) if spec.profile is not None else records


@dataclass(frozen=True)
class FitModels:
    """Which models `fit_params` fits: the `utility` SABA maximizes ("throughput", or "paper": G/C), the gain model
    (`gain`: "table" adds a per-budget gain table, "eq16" the paper's alone) with the floor `lam_min`, and the
    cost model (`cost`: "table" adds a per-budget cost table, "eq17" without it) with or without the c3 / c4 cost
    terms (`concave`, `shared_prefix`; `saba_fit.fit_cost`)."""

    utility: str = "throughput"
    gain: str = "table"  # GAIN_MODELS
    cost: str = "table"  # COST_MODELS
    concave: bool = True
    shared_prefix: bool = True
    lam_min: float = 0.5

    def __post_init__(self):
        require(self.gain in GAIN_MODELS, f"gain model must be one of {GAIN_MODELS}, got {self.gain!r}")
        require(self.cost in COST_MODELS, f"cost model must be one of {COST_MODELS}, got {self.cost!r}")


def fit_params(records: list[ReplayRecord], grid: list[int], depth: int, window: int = 8, meta: dict | None = None,
               profile: CostProfile | None = None, models: FitModels = FitModels()) -> SabaParams:
    """SabaParams from replay records (see module doc) with `models`; `c_ar` when budget 0 was replayed;
    `profile`: no cost fit, the profile's costs (`cost_profile.with_costs`; the records need no times)."""
    ref = [r for r in records if r.reference and r.budget > 0]
    on_grid = [r for r in records if not r.reference and r.budget > 0]
    require(len(ref) > 0 and len(on_grid) > 0, "no replayed rounds to fit the gain on")
    ar = [r for r in records if not r.reference and r.budget == 0]
    if profile is None:
        timed = on_grid + ar
        budgets, prefixes, latency = ([r.budget for r in timed], [r.prefix_len for r in timed],
                                      [r.latency - r.t_draft for r in timed])
        c, c_ar, r2 = fit_cost(budgets, prefixes, latency, models.concave, models.shared_prefix)
        cost_table = fit_cost_table(budgets, prefixes, latency, c) if models.cost == "table" else None
        rows_cost = fit_rows_cost(budgets, prefixes, latency, [r.accepted for r in timed], c, cost_table)
        c_draft = statistics.median(r.t_draft for r in ref)
        c[0] += c_draft
    else:
        c, c_ar, c_draft, cost_table, rows_cost, r2 = (profile.c, profile.c_ar, profile.c_draft, profile.cost_table,
                                                       profile.c_rows, None)
    phi, alpha, rmse = fit_gain([r.state for r in on_grid], [r.budget for r in on_grid],
                                [r.accepted for r in on_grid], models.lam_min, depth)
    hist_prior = float(np.mean([r.accepted for r in ref]))
    fit = {"cost_r2": r2, "gain_rmse_tokens": rmse, "cost_points": len(on_grid), "ar_points": len(ar),
           "rounds": len(ref)}
    table = None
    if models.gain == "table":
        table, fit["gain_table_rmse_tokens"] = fit_gain_table([r.state for r in on_grid],
                                                              [r.budget for r in on_grid],
                                                              [r.accepted for r in on_grid])
    params = SabaParams(phi=phi, alpha=alpha, c=list(c), grid=sorted(b for b in set(grid) if b > 0), window=window,
                        hist_prior=hist_prior, lam_min=models.lam_min, utility=models.utility,
                        c_ar=None if c_ar is None else list(c_ar), c_draft=c_draft,
                        gain_table=table, cost_table=cost_table, rows_cost=rows_cost,
                        meta={**(meta or {}), "fit": fit})
    return params if profile is None else with_costs(params, profile)


def offline_tracking(params: SabaParams, records: list[ReplayRecord], depth: int | None = None) -> dict:
    """Retained oracle throughput of SABA's choices on replay records (measured a_t(B) / l_t(B)); the
    oracle chooses among the same budgets (the params' grid, and the AR step when it has `c_ar`).
    `speedup_vs_ar`: the choices' pooled tokens per second over the AR steps' (None without them)."""
    rounds: dict[int, list[ReplayRecord]] = {}
    for r in records:
        if not r.reference:
            rounds.setdefault(r.round, []).append(r)
    retained, prev, corr = [], None, GainCorrection(params.gain_prior)
    tokens = seconds = ar_seconds = 0.0
    for t in sorted(rounds):
        recs = rounds[t]
        by_b = {r.budget: r for r in recs}
        grid = BudgetGrid(params, sorted(b for b in by_b if b in params.grid) or sorted(b for b in by_b if b > 0))
        s, prefix = recs[0].state, recs[0].prefix_len
        if prev is not None and prev[1] >= prefix:  # a new prompt starts: no previous draft, no evidence
            prev, corr = None, GainCorrection(params.gain_prior)
        best = max(r.tps for r in recs if r.budget in grid.budgets or (r.budget == 0 and params.c_ar is not None))
        u_ar = ar_utility(params, prefix) if 0 in by_b else None
        choice = grid.choose(s, prefix, depth, corr.k)
        if u_ar is not None and prev is not None and u_ar > grid.choose([*prev[0][:2], *s[2:]], prefix, depth,
                                                                         corr.k).utility:
            a, latency = by_b[0].accepted, by_b[0].latency
        elif u_ar is not None and params.post_gate and u_ar > choice.after_draft:
            t_draft = max(r.t_draft for r in recs)  # the drafted budgets' draft time (the AR step's is 0)
            a, latency = by_b[0].accepted, by_b[0].latency + t_draft
        else:
            corr.add(choice.extra, by_b[choice.budget].accepted)
            a, latency = by_b[choice.budget].accepted, by_b[choice.budget].latency
        prev = (s, prefix)
        retained.append(a / latency / best)
        tokens, seconds = tokens + a, seconds + latency
        ar_seconds += by_b[0].latency if 0 in by_b else math.nan
    ret = np.array(retained)
    # pooled: tokens over seconds of the choices, over what AR steps would take per token (same rounds)
    speedup = (tokens / seconds) / (len(ret) / ar_seconds)
    return {"rounds": len(ret), "mean_retained": float(ret.mean()), "frac_ge_95": float((ret >= 0.95).mean()),
            "speedup_vs_ar": None if math.isnan(speedup) else speedup}


def write_records(path, records: list[ReplayRecord]) -> None:
    """Replay records as JSONL (written whole to a temporary file, then renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    tmp.replace(path)


def read_replay_records(path) -> list[ReplayRecord]:
    path = Path(path)
    require(path.is_file(), f"replay records not found: {path} (written by `graft calibrate --records PATH`)")
    return [ReplayRecord(**json.loads(line)) for line in path.read_text().splitlines() if line]


# ----------------------------------------------------------------------------- CLI


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="fit SABA's cost and gain models on this machine (validation prompts)")
    add_model_args(p)
    p.add_argument("--grid", nargs="+", type=int, default=list(CPU_GRID), help="SABA budget grid "
                   "(paper, GPU: 32 48 .. 512)")
    p.add_argument("--val-prompts", type=int, default=8, help="validation prompts to replay for the gain fit")
    p.add_argument("--regular-prompts", type=int, default=REGULAR_PROMPTS, help="prompts of the regular set's "
                   f"validation split replayed beside them, so the fit sees rounds whose gain keeps growing with B "
                   f"(default {REGULAR_PROMPTS})")
    p.add_argument("--ref-budget", type=int, default=8, help="budget of the reference ddtree trajectories")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-prompt-tokens", type=int, default=384)
    p.add_argument("--window", type=int, default=8, help="acceptance history window w")
    p.add_argument("--utility", default="throughput", help="throughput (default) or paper (G/C)")
    p.add_argument("--gain", default="table", choices=GAIN_MODELS, help="gain model: a per-budget linear "
                   "table on s_t (default; `graftlib.methods.saba_extensions`), or the paper's eq. 16 alone")
    p.add_argument("--cost", default="table", choices=COST_MODELS, help="cost model: eq. 17 plus a measured "
                   "per-budget correction (default; `graftlib.methods.saba_extensions`), or eq. 17 alone")
    p.add_argument("--out", default=str(DEFAULT_PATH), help="parameters JSON (default: what ddtree+saba loads)")
    p.add_argument("--records", default=None, help="also write the replay records here (JSONL, one per "
                   "(round, budget)), to refit variants with `calibrate.fit_params` without measuring again")
    p.add_argument("--checkpoint", default=None, metavar="JSONL", help="keep each prompt's replay records here as "
                   "it finishes; a re-run with the same settings goes on with the next prompt")
    p.add_argument("--from-records", default=None, help="fit on replay records written by --records instead "
                   "of replaying (no measuring; the records' machine is the calibration's, and --temperature "
                   "/ --top-p / --seed should name the sampling they were replayed with)")
    p.add_argument("--cost-profile", default=None, metavar="FILE",
                   help="decide under this cost profile (e.g. graftlib/assets/costs/paper-a100.json): its costs "
                   "instead of a cost fit, and the grid's acceptance walked along the greedy continuation instead "
                   "of verified, so grids up to 512 nodes run in minutes on a CPU (T = 0 only)")
    p.add_argument("--strength", default=None, metavar="FILE",
                   help="a drafter-strength file (graft calibrate-strength): "
                   "each prompt drafted at its task's calibrated strength, a construction (with --cost-profile and "
                   "--regular-prompts 0)")
    add_sampling_args(p)
    p.set_defaults(func=run)


@dataclass(frozen=True)
class CalibrationConfig:
    """What a SABA calibration replays and fits (`calibrate_pair`; `graft calibrate`'s options)."""

    grid: tuple[int, ...]  # SABA's budgets (the AR step is always replayed beside them)
    val_prompts: int = 8  # validation prompts replayed
    regular_prompts: int = 0  # and prompts of the regular set's validation split (rounds whose gain keeps growing)
    ref_budget: int = 8  # the reference DDTree trajectories' budget
    max_new_tokens: int = 64
    max_prompt_tokens: int = 384
    window: int = 8  # SABA's acceptance history window w
    models: FitModels = FitModels()  # the utility, gain and cost models fitted
    sampling: Sampling = GREEDY
    profile: CostProfile | None = None  # walk the grid and price it by this profile instead of timing it
    strength: str | None = None  # a drafter-strength file: each prompt drafted at its task's strength


def calibrate_pair(pair, out, cfg: CalibrationConfig, *, records: str | None = None, from_records: str | None = None,
                   checkpoint: str | None = None, command: str | None = None, log=print) -> SabaParams:
    """Replay `cfg.val_prompts` validation prompts over `cfg.grid` (or read `from_records`), fit, save to `out`.
    `regular_prompts` adds that many prompts of the regular set's validation split (`graftlib.data.regular`:
    rounds whose gain keeps growing with B, so the fit has seen confident states; never its eval split).
    The saved meta names the pair (`Pair.identity()`) and the hardware (`core.hardware.hardware_id`)
    the calibration belongs to (`graftlib.inputs.artifacts`), and at T > 0 its sampling.
    `checkpoint`: per-prompt replay records (`replay_rounds`), so an interrupted calibration resumes.
    `profile`: the grid is walked, not verified (`graftlib.training.graft.replay.WalkReplay`, T = 0), and the costs
    are the profile's (`fit_params`); the records are priced by it (`replay.priced`). `strength`: a drafter-strength
    file; each prompt is drafted at its task's strength (`graftlib.models.strength`, a construction: walked
    under `profile` only, and the regular set, which has no strength, left out). `records`: also write the replay
    records there."""
    from graftlib.data.prompts import format_prompt, load_items, pool

    grid, val_prompts, regular_prompts, profile, strength = (list(cfg.grid), cfg.val_prompts, cfg.regular_prompts,
                                                              cfg.profile, cfg.strength)
    sampling, max_new_tokens, max_prompt_tokens = cfg.sampling, cfg.max_new_tokens, cfg.max_prompt_tokens
    require(val_prompts >= 1, "--val-prompts must be >= 1")
    require(profile is None or sampling.greedy, "--cost-profile walks the grid along the greedy continuation: T = 0 "
                                                "only")
    require(0 <= regular_prompts <= REGULAR_VAL, f"--regular-prompts must be in [0, {REGULAR_VAL}], got "
                                                 f"{regular_prompts}")
    require(all(b >= 1 for b in grid), f"--grid budgets must be >= 1 (the AR step is always replayed), got {grid}")
    require(strength is None or (profile is not None and regular_prompts == 0), "--strength drafts along greedy AR's "
            "tokens: calibrate walked under a --cost-profile, with --regular-prompts 0 (the regular set has no "
            "strength)")
    items = pool("val", val_prompts) + (load_items("regular", "val", regular_prompts) if regular_prompts else [])
    prompts = {item.uid: format_prompt(item, pair.tokenizer, max_prompt_tokens).input_ids for item in items}
    require(len(prompts) == len(items), "the validation prompts repeat a uid")
    drafter, before, setting = pair.drafter, None, {"pair": pair.identity().to_dict(),
                                                    "max_prompt_tokens": max_prompt_tokens}
    if strength is not None:
        strengths = TaskStrengths(strength)
        drafter, before = drafting_along(pair.target, pair.drafter, strengths, [item.task for item in items],
                                         max_new_tokens + 3 * pair.drafter.block_size, pair.eos_ids)
        setting.update(strengths.describe())
    if from_records:
        replayed = read_replay_records(from_records)
        require({r.budget for r in replayed if not r.reference} >= {0, *grid},
                f"records {from_records} do not cover the grid {grid} and the AR step")
        replayed = priced(replayed, profile) if profile is not None else replayed
    else:
        at = "" if sampling.greedy else f" at T = {sampling.temperature} (top-p {sampling.top_p}, seed {sampling.seed})"
        log(f"replaying {len(prompts)} validation prompts over the grid {grid} and an AR step{at} ...")
        spec = ReplaySpec((0, *grid), max_new_tokens, sampling=sampling, walk=profile is not None, profile=profile,
                          window=cfg.window)  # the prompts are token ids already, cut to max_prompt_tokens above
        replayed = replay_rounds(replace(pair, drafter=drafter), prompts, spec, cfg.ref_budget, checkpoint=checkpoint,
                                 setting=setting, before_prompt=before, log=log)
    depth = pair.drafter.block_size - 1
    meta = calibration_meta(pair.describe(), grid=grid, val_prompts=val_prompts, regular_prompts=regular_prompts,
                            ref_budget=cfg.ref_budget,
                            max_new_tokens=max_new_tokens, pair=pair.identity().to_dict(),
                            hardware=hardware_id(pair.device, pair.target.dtype),
                            command=command or "graft " + " ".join(sys.argv[1:]), **sampling.setting(),
                            **(strengths.describe() if strength is not None else {}))
    if records:
        write_records(records, replayed)
    params = fit_params(replayed, grid, depth, cfg.window, meta=meta, profile=profile, models=cfg.models)
    params.meta["offline_tracking"] = offline_tracking(params, replayed, depth)
    params.meta["offline_tracking_uncorrected"] = offline_tracking(replace(params, gain_prior=None), replayed, depth)
    params.save(out)
    return SabaParams.load(out)


def run(args) -> int:
    from graftlib.models.pair import load_pair

    profile = load_profile(args.cost_profile) if args.cost_profile else None  # a bad file fails before the models load
    pair = load_pair(args.target, args.drafter, args.device, args.device_map, dtype=args.dtype)
    cfg = CalibrationConfig(tuple(args.grid), args.val_prompts, args.regular_prompts, args.ref_budget,
                            args.max_new_tokens, args.max_prompt_tokens, args.window,
                            FitModels(args.utility, args.gain, args.cost), sampling_from_args(args), profile,
                            args.strength)
    params = calibrate_pair(pair, args.out, cfg, records=args.records, from_records=args.from_records,
                            checkpoint=args.checkpoint, log=lambda m: print(m, flush=True))
    fit = params.meta["fit"]
    r2 = f"R^2 {fit['cost_r2']:.3f}" if fit["cost_r2"] is not None else f"cost profile {profile.name} {profile.id}"
    print(f"c = {params.c} ({r2}); c_ar = {params.c_ar}; phi = {params.phi}; alpha = {params.alpha} "
          f"(RMSE {fit['gain_rmse_tokens']:.2f} tokens); hist_prior = {params.hist_prior:.2f}")
    print(f"in-sample retained oracle throughput: {params.meta['offline_tracking']} "
          f"(without the online gain correction: {params.meta['offline_tracking_uncorrected']})")
    print(f"saved {args.out} (id {params.id})")
    return 0
