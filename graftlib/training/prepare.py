"""`graft prepare`: a pair's TDES scorers and SABA calibration in one command, into that pair's folder.

The shipped scorers and calibration belong to the embedded pair on a 2-core CPU; another pair or machine
needs its own. The steps, each the existing command's own function, into one folder (`ArtifactDir`):
  1. traces    `graft traces`: DDTree decodes of the `tdes` pool
  2. TDES      `graft train-tdes` on those traces, and one scorer per `--task-scorers` task
  3. SABA      `graft calibrate`: same-prefix replay of validation prompts on this machine
  4. SABA in the paper's regime: `graft calibrate` on the paper's grid under its A100 costs, walked
and manifest.json (the pair, hardware, sizes, each step's status, outputs, ids and seconds). With `--strength
FILE` steps 1, 2 and 4 run on the drafter-strength construction (each prompt at its task's strength) into a
folder of their own, and step 3 is skipped: a construction is never timed.

Resumable: a step whose output exists, is complete and was fitted for this pair (and hardware, for the
machine's calibration) is kept; the manifest is written after every step. Invariant: every scorer in the
manifest was trained on the traces it names. A folder holding another pair's artifacts is refused.

Details: docs/internals.md, `graftlib.training.prepare`.
"""

import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.hardware import hardware_id
from graftlib.core.paths import portable
from graftlib.core.records import write_json_atomic
from graftlib.core.version import __version__
from graftlib.data.prompts import TDES_TASKS
from graftlib.inputs.artifacts import MANIFEST_SCHEMA, ArtifactDir, ShippedAssets
from graftlib.inputs.cli_args import add_model_args
from graftlib.inputs.cost_profile import PAPER_PROFILE, CostProfile
from graftlib.methods.fitted import default_dir
from graftlib.methods.saba_params import CPU_GRID, GPU_GRID, PAPER_GRID, SabaParams
from graftlib.methods.tdes import scorer_config, scorer_id
from graftlib.models.pair import PairId
from graftlib.models.strength import TaskStrengths
from graftlib.training.graft.calibrate import REGULAR_PROMPTS, CalibrationConfig, calibrate_pair
from graftlib.training.graft.tdes_train import TDESConfig, train_from_traces
from graftlib.training.graft.traces import TraceConfig, make_traces


@dataclass
class PrepareConfig:
    trace_prompts: int = 96  # `tdes`-pool prompts decoded for the traces
    trace_budget: int = 16  # DDTree nodes per traced round
    trace_tokens: int = 96  # new tokens per traced prompt
    trace_minutes: float | None = None  # start no new trace shard after this long (None: trace them all)
    shard_size: int = 8
    max_prompt_tokens: int = 384
    tdes_epochs: int = 8
    task_scorers: tuple[str, ...] = ()  # tasks that also get a scorer of their own (tdes-<task>.*)
    val_prompts: int = 8  # validation prompts replayed for SABA
    regular_prompts: int = REGULAR_PROMPTS  # and prompts of the regular set's validation split (confident states)
    calib_tokens: int = 64  # new tokens per replayed prompt
    ref_budget: int = 8
    grid: tuple[int, ...] | None = None  # SABA's budgets; None: CPU_GRID on a CPU, GPU_GRID on a GPU
    paper_prompts: int = 16  # validation prompts of step 4 (beside `regular_prompts`); 0: no step 4
    paper_ref_budget: int = 128  # its reference trajectories' DDTree budget (Table 2's DDTree: 110 nodes a round)
    strength: str | None = None  # a drafter-strength file: every part fitted on the construction (no step 3)

    def check(self) -> "PrepareConfig":
        for name in ("trace_prompts", "trace_budget", "trace_tokens", "shard_size", "max_prompt_tokens",
                     "tdes_epochs", "val_prompts", "calib_tokens", "ref_budget", "paper_ref_budget"):
            require(getattr(self, name) >= 1, f"prepare: {name} must be >= 1, got {getattr(self, name)}")
        require(self.paper_prompts >= 0, f"prepare: paper_prompts must be >= 0, got {self.paper_prompts}")
        require(self.grid is None or (len(self.grid) > 0 and min(self.grid) >= 1),
                f"prepare: the SABA grid must be budgets >= 1, got {self.grid}")
        unknown = [t for t in self.task_scorers if t not in TDES_TASKS]
        require(not unknown, f"prepare: no traces of task(s) {unknown} for a per-task scorer: the `tdes` pool "
                f"traced holds {', '.join(TDES_TASKS)}")
        require(len(set(self.task_scorers)) == len(self.task_scorers),
                f"prepare: a task is named twice in the per-task scorers {list(self.task_scorers)}")
        return self


QUICK = PrepareConfig(trace_prompts=8, trace_tokens=32, shard_size=4, tdes_epochs=2, val_prompts=2, regular_prompts=0,
                      calib_tokens=32, paper_prompts=0)


def _fitted_for(record: dict, pair: PairId, where: str) -> bool:
    return record.get("pair") is not None and PairId.from_dict(record["pair"], where).same(pair)


def _open_manifest(d: ArtifactDir, pair: PairId, strength: dict | None) -> dict:
    """The folder's manifest, refusing one of another pair or drafter strength; a fresh one when there is none."""
    if not d.manifest.is_file():
        return {"schema": MANIFEST_SCHEMA, "pair": pair.to_dict(), "steps": {}, "strength": strength}
    manifest = d.read_manifest()
    require(_fitted_for(manifest, pair, str(d.manifest)), f"{d.root} holds the artifacts of "
            f"{PairId.from_dict(manifest.get('pair'), str(d.manifest))}, not of this pair, {pair}: "
            f"choose another --out (e.g. {artifact_folder(pair, strength)})")
    require(manifest.get("strength") == strength, f"{d.root} holds artifacts fitted "
            f"{_drafted(manifest.get('strength'))}, not {_drafted(strength)}: choose another --out "
            f"(e.g. {artifact_folder(pair, strength)})")
    return manifest


def _drafted(strength: dict | None) -> str:
    return f"at the drafter strengths of {strength['strength_file']}" if strength else "with the real drafter"


def artifact_folder(pair: PairId, strength: dict | None = None) -> Path:
    """The default folder of a pair's artifacts (`default_dir`), one more per drafter-strength file."""
    base = default_dir(pair)
    return base.with_name(f"{base.name}-strength-{strength['strength_id']}") if strength else base


def _kept(manifest: dict, step: str, record: dict | None, pair: PairId, where: str,
          hardware: str | None = None) -> bool:
    """The step's output exists, is complete, is this pair's (and, given `hardware`, this machine's)."""
    done = manifest["steps"].get(step, {}).get("complete") is True
    return (done and record is not None and _fitted_for(record, pair, where)
            and (hardware is None or record.get("hardware") == hardware))


def _tdes_config(pair, cfg: PrepareConfig) -> TDESConfig:
    return TDESConfig(epochs=cfg.tdes_epochs, device="cuda" if pair.device.type == "cuda" else "cpu")


def _trace(pair, d: ArtifactDir, cfg: PrepareConfig) -> dict:
    t0 = time.perf_counter()
    tc = TraceConfig(target=pair.target_name, drafter=pair.drafter_name, pool="tdes", n=cfg.trace_prompts,
                     budget=cfg.trace_budget, max_new_tokens=cfg.trace_tokens, max_prompt_tokens=cfg.max_prompt_tokens,
                     shard_size=cfg.shard_size, max_minutes=cfg.trace_minutes, strength=cfg.strength)
    index = make_traces(d.traces, tc, pair=pair)
    traced = sum(s["count"] for s in index["shards"])
    return {"complete": traced >= cfg.trace_prompts, "dir": portable(d.traces), "prompts": traced,
            "rounds": sum(s["rounds"] for s in index["shards"]), "seconds": round(time.perf_counter() - t0, 1)}


def _train(pair, d: ArtifactDir, cfg: PrepareConfig, out: Path, task: str | None, complete: bool, command: str,
           log) -> dict:
    """One scorer on the folder's traces (`task`: that task's rounds only), as its manifest step."""
    t0 = time.perf_counter()
    train_from_traces(d.traces, out, _tdes_config(pair, cfg), pair.target_name, tasks=[task] if task else None,
                      embed=pair.target.get_input_embeddings().weight, command=command, log=log)
    step = {"complete": complete, "file": portable(out), "id": scorer_id(out),
            "seconds": round(time.perf_counter() - t0, 1)}
    return dict(step, task=task) if task else step


def _task_step(task: str) -> str:
    return f"tdes-{task}"


def _drop_stale_task_scorers(d: ArtifactDir, steps: dict, cfg: PrepareConfig, log) -> None:
    """Remade traces: a per-task scorer not asked for this time was trained on the old ones; drop it."""
    for step in [s for s in steps if s.startswith("tdes-") and s.removeprefix("tdes-") not in cfg.task_scorers]:
        path = d.task_tdes(step.removeprefix("tdes-"))
        for stale in (path, path.with_suffix(".json")):
            stale.unlink(missing_ok=True)
        del steps[step]
        log(f"prepare: {path} was trained on the former traces and is not asked for: removed")


def _save(d: ArtifactDir, manifest: dict) -> None:
    write_json_atomic(d.manifest, manifest)


def prepare(pair, out: str | Path, cfg: PrepareConfig | None = None, command: str | None = None, log=print) -> dict:
    """Make (or resume) the pair's artifacts in `out` (module doc); returns the manifest."""
    cfg = (cfg or PrepareConfig()).check()
    d = ArtifactDir(Path(out))
    ident, hw = pair.identity(), hardware_id(pair.device, pair.target.dtype)
    command = command or "graft " + " ".join(sys.argv[1:])
    strength = TaskStrengths(cfg.strength).describe() if cfg.strength else None
    require(strength is None or cfg.paper_prompts > 0, "prepare --strength fits SABA under the paper's costs only "
            "(a construction is never timed): --paper-prompts must be > 0")
    manifest = _open_manifest(d, ident, strength)
    d.root.mkdir(parents=True, exist_ok=True)
    manifest.update(pair=ident.to_dict(), hardware=hw, graftlib=__version__, command=command, config=asdict(cfg),
                    date=time.strftime("%Y-%m-%d %H:%M:%S"))
    steps = manifest["steps"]
    tdes_config = scorer_config(d.tdes) if d.tdes.is_file() else None
    retrace = not _kept(manifest, "tdes", tdes_config, ident, str(d.tdes))
    if retrace:
        steps["traces"] = dict(_trace(pair, d, cfg), status="made")
        _drop_stale_task_scorers(d, steps, cfg, log)
        steps["tdes"] = dict(_train(pair, d, cfg, d.tdes, None, steps["traces"]["complete"], command, log),
                             status="made")
        _save(d, manifest)
    else:
        log(f"prepare: TDES scorer {d.tdes} is this pair's and complete: kept")
        steps["tdes"]["status"] = steps["traces"]["status"] = "kept"
    for task in cfg.task_scorers:
        path, step = d.task_tdes(task), _task_step(task)
        config = scorer_config(path) if path.is_file() else None
        if not retrace and _kept(manifest, step, config, ident, str(path)) and config.get("tasks") == [task]:
            log(f"prepare: {task} scorer {path} is this pair's and complete: kept")
            steps[step]["status"] = "kept"
        else:
            steps[step] = dict(_train(pair, d, cfg, path, task, steps["traces"]["complete"], command, log),
                               status="made")
            _save(d, manifest)
    if strength is not None:
        log("prepare: no SABA calibration on this machine for a drafter-strength construction (never timed)")
    elif _kept(manifest, "saba", SabaParams.load(d.saba).meta if d.saba.is_file() else None, ident, str(d.saba), hw):
        log(f"prepare: SABA calibration {d.saba} is this pair's on {hw}: kept")
        steps["saba"]["status"] = "kept"
    else:
        t0 = time.perf_counter()
        grid = list(cfg.grid or (GPU_GRID if pair.device.type == "cuda" else CPU_GRID))
        calib = CalibrationConfig(tuple(grid), cfg.val_prompts, cfg.regular_prompts, cfg.ref_budget, cfg.calib_tokens,
                                  cfg.max_prompt_tokens)
        params = calibrate_pair(pair, d.saba, calib, command=command, log=log)
        steps["saba"] = {"complete": True, "status": "made", "file": portable(d.saba), "id": params.id,
                         "hardware": hw, "grid": grid, "seconds": round(time.perf_counter() - t0, 1)}
    _save(d, manifest)
    if cfg.paper_prompts:
        _paper_saba(pair, d, cfg, manifest, command, log)
        _save(d, manifest)
    return manifest


def _paper_saba(pair, d: ArtifactDir, cfg: PrepareConfig, manifest: dict, command: str, log) -> None:
    """Step 4 (module doc): SABA on PAPER_GRID under the paper's profile, kept when it is this pair's
    for this profile (the walked gain does not depend on the machine)."""
    profile, ident, steps = CostProfile.load(PAPER_PROFILE), pair.identity(), manifest["steps"]
    meta = SabaParams.load(d.saba_paper).meta if d.saba_paper.is_file() else None
    if (_kept(manifest, "saba-paper", meta, ident, str(d.saba_paper))
            and meta.get("cost_profile") == profile.label and steps["saba-paper"].get("config") == _paper_config(cfg)):
        log(f"prepare: SABA calibration {d.saba_paper} is this pair's under {profile.name}: kept")
        steps["saba-paper"]["status"] = "kept"
        return
    t0 = time.perf_counter()
    calib = CalibrationConfig(PAPER_GRID, cfg.paper_prompts, _paper_regular(cfg), cfg.paper_ref_budget,
                              cfg.calib_tokens, cfg.max_prompt_tokens, profile=profile, strength=cfg.strength)
    params = calibrate_pair(pair, d.saba_paper, calib, checkpoint=str(d.root / "saba-paper-replay.jsonl"),
                            command=command, log=log)
    steps["saba-paper"] = {"complete": True, "status": "made", "file": portable(d.saba_paper), "id": params.id,
                           "cost_profile": profile.label, "config": _paper_config(cfg),
                           "seconds": round(time.perf_counter() - t0, 1)}


def _paper_regular(cfg: PrepareConfig) -> int:
    """Step 4's regular-set prompts: none on the construction (the regular set has no calibrated strength)."""
    return 0 if cfg.strength else cfg.regular_prompts


def _paper_config(cfg: PrepareConfig) -> dict:
    return {"prompts": cfg.paper_prompts, "regular_prompts": _paper_regular(cfg), "ref_budget": cfg.paper_ref_budget,
            "tokens": cfg.calib_tokens, "grid": list(PAPER_GRID)}


# ----------------------------------------------------------------------------- CLI


def add_parser(sub) -> None:
    d = PrepareConfig()
    p = sub.add_parser("prepare", help="a pair's TDES scorer and SABA calibration (traces -> train-tdes -> calibrate) "
                       "into one folder, resumable")
    add_model_args(p)
    p.add_argument("--out", default=None, help="the pair's folder (default: artifacts/<target>--<drafter>)")
    p.add_argument("--quick", action="store_true", help="small sizes (QUICK: 8 traced prompts, 2 epochs, 2 "
                   "validation prompts): a first try, minutes on a CPU")
    p.add_argument("--trace-prompts", type=int, default=None,
                   help=f"tdes-pool prompts to trace (default {d.trace_prompts})")
    p.add_argument("--trace-minutes", type=float, default=None, help="start no new trace shard after this many "
                   "minutes (a re-run goes on)")
    p.add_argument("--task-scorers", nargs="+", default=None, metavar="TASK", help="also train a scorer on each "
                   "task's traces only (tdes-TASK.*; the shipped gsm8k scorer: --task-scorers gsm8k)")
    p.add_argument("--val-prompts", type=int, default=None, help="validation prompts for SABA (default "
                                                                 f"{d.val_prompts})")
    p.add_argument("--regular-prompts", type=int, default=None, help="prompts of the regular set's validation split "
                   f"replayed for SABA beside them (default {d.regular_prompts})")
    p.add_argument("--paper-prompts", type=int, default=None, help="validation prompts of step 4, SABA on the paper's "
                   f"grid under its A100 costs (default {d.paper_prompts}; 0: skip it)")
    p.add_argument("--grid", nargs="+", type=int, default=None, help="SABA budget grid (default: "
                   f"{' '.join(map(str, CPU_GRID))} on a CPU, {' '.join(map(str, GPU_GRID))} on a GPU)")
    p.add_argument("--strength", default=None, metavar="FILE", help="fit every part on the drafter-strength "
                   "construction (a `graft calibrate-strength` file: each prompt at its task's strength): traces, "
                   "scorers and SABA under the paper's costs, into their own folder; --ship names them "
                   "paper-acceptance")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--ship", action="store_true", help="then copy the folder's scorers and calibration into the "
                   "shipped assets (the embedded pair only; `graft ship-artifacts`)")
    p.add_argument("--assets", default=None, help=f"where --ship writes (default: {portable(ShippedAssets().root)})")
    p.set_defaults(func=run)


def config_from_args(args) -> PrepareConfig:
    base = QUICK if args.quick else PrepareConfig()
    given = {"trace_prompts": args.trace_prompts, "trace_minutes": args.trace_minutes,
             "val_prompts": args.val_prompts, "regular_prompts": args.regular_prompts,
             "paper_prompts": args.paper_prompts, "strength": args.strength,
             "grid": tuple(args.grid) if args.grid else None,
             "task_scorers": tuple(args.task_scorers) if args.task_scorers else None}
    return replace(base, **{k: v for k, v in given.items() if v is not None}).check()


def run(args) -> int:
    import torch

    from graftlib.models.pair import load_pair
    from graftlib.training.ship import require_embedded, ship

    if args.ship:
        require_embedded(args.target, args.drafter)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = config_from_args(args)
    pair = load_pair(args.target, args.drafter, args.device, args.device_map, dtype=args.dtype)
    strength = TaskStrengths(cfg.strength).describe() if cfg.strength else None
    out = Path(args.out) if args.out else artifact_folder(pair.identity(), strength)
    manifest = prepare(pair, out, cfg, log=lambda m: print(m, flush=True))
    print(f"\nartifacts of {pair.identity()} on {manifest['hardware']} in {out}:")
    for step, s in manifest["steps"].items():
        print(f"  {step:<7} {s['status']:<5} {'complete' if s['complete'] else 'INCOMPLETE (re-run to go on)':<12} "
              f"{s.get('seconds', 0):>7.1f} s  {s.get('file') or s.get('dir')}")
    if strength is None:
        print(f"use them: graft generate --target {args.target} --drafter {args.drafter} --artifacts {out} "
              f"--method graft --prompt '...'  (graft bench takes --artifacts too)")
    else:
        print("fitted on the drafter-strength construction: the paper+acceptance regime reads them once shipped "
              "(--ship)")
    if args.ship:
        assets = ShippedAssets(Path(args.assets)) if args.assets else ShippedAssets()
        ship(out, pair.identity(), assets, log=lambda m: print(m, flush=True))
    return 0
