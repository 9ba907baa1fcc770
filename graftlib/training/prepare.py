"""`graft prepare`: a pair's TDES scorers and SABA calibration in one command, into that pair's folder.

The shipped scorers and calibration belong to the embedded pair on a 2-core CPU; another pair (or
machine) needs its own, and `graftlib.inputs.artifacts` refuses another pair's scorer and
calibration (and warns about another machine's calibration). The steps, each the existing
command's own function:
  1. traces   `graft traces` (`traces.make_traces`): DDTree decodes of the `tdes` pool
  2. TDES     `graft train-tdes` (`tdes_train.train_from_traces`) on those traces
  2b. per task `graft train-tdes --tasks T` on the same traces, one scorer per `--task-scorers` task
              (the shipped `gsm8k` scorer of Figure 5)
  3. SABA     `graft calibrate` (`calibrate.calibrate_pair`): same-prefix replay of validation prompts
  4. SABA in the paper's regime  `graft calibrate --cost-profile graftlib/assets/costs/paper-a100.json`
              on the paper's grid (32..512 by 16): the gain walked along the greedy continuation
              (`replay.WalkReplay`), the costs the paper's (`paper_prompts` = 0 skips it)
into one folder (`ArtifactDir`): traces/, tdes.safetensors + tdes.json, tdes-<task>.safetensors +
.json, saba.json, saba-paper-a100.json and manifest.json (the pair, the hardware, the sizes, each step's status, outputs,
ids and seconds).

Resumable: a step whose output exists, is complete and was fitted for this pair (the calibration:
also on this hardware; step 4's gain is the pair's on any machine) is kept; the manifest is written after every step, so an interrupted run
keeps what it finished; traces resume shard by shard; `trace_minutes` can stop the traces early,
and the scorers are then trained on what there is and marked incomplete, so a re-run goes on
tracing and trains again. Invariant: every scorer in the manifest was trained on the traces the
manifest names (remade traces retrain every scorer, and drop a per-task scorer no longer asked for).
A folder that holds another pair's artifacts is refused.
`PrepareConfig` holds the sizes; `QUICK` a small set (minutes on a CPU for the embedded pair).
The folder is used with `--artifacts DIR` (`graft generate`, `graft bench`); for the embedded pair
`--ship` then copies it into graftlib/assets (`graftlib.training.ship`; `make artifacts`).
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
from graftlib.training.graft.calibrate import REGULAR_PROMPTS, calibrate_pair
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


def _open_manifest(d: ArtifactDir, pair: PairId) -> dict:
    """The folder's manifest, refusing one of another pair; a fresh one when there is none."""
    if not d.manifest.is_file():
        return {"schema": MANIFEST_SCHEMA, "pair": pair.to_dict(), "steps": {}}
    manifest = d.read_manifest()
    require(_fitted_for(manifest, pair, str(d.manifest)), f"{d.root} holds the artifacts of "
            f"{PairId.from_dict(manifest.get('pair'), str(d.manifest))}, not of this pair, {pair}: "
            f"choose another --out (e.g. {default_dir(pair)})")
    return manifest


def _kept(manifest: dict, step: str, record: dict | None, pair: PairId, where: str, hardware: str | None = None) -> bool:
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
                     shard_size=cfg.shard_size, max_minutes=cfg.trace_minutes)
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
    manifest = _open_manifest(d, ident)
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
    saba_meta = SabaParams.load(d.saba).meta if d.saba.is_file() else None
    if _kept(manifest, "saba", saba_meta, ident, str(d.saba), hw):
        log(f"prepare: SABA calibration {d.saba} is this pair's on {hw}: kept")
        steps["saba"]["status"] = "kept"
    else:
        t0 = time.perf_counter()
        grid = list(cfg.grid or (GPU_GRID if pair.device.type == "cuda" else CPU_GRID))
        params = calibrate_pair(pair, d.saba, grid, cfg.val_prompts, cfg.ref_budget, cfg.calib_tokens,
                                cfg.max_prompt_tokens, command=command, regular_prompts=cfg.regular_prompts, log=log)
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
    params = calibrate_pair(pair, d.saba_paper, list(PAPER_GRID), cfg.paper_prompts, cfg.paper_ref_budget,
                            cfg.calib_tokens, cfg.max_prompt_tokens, command=command,
                            regular_prompts=cfg.regular_prompts, profile=profile,
                            checkpoint=str(d.root / "saba-paper-replay.jsonl"), log=log)
    steps["saba-paper"] = {"complete": True, "status": "made", "file": portable(d.saba_paper), "id": params.id,
                           "cost_profile": profile.label, "config": _paper_config(cfg),
                           "seconds": round(time.perf_counter() - t0, 1)}


def _paper_config(cfg: PrepareConfig) -> dict:
    return {"prompts": cfg.paper_prompts, "regular_prompts": cfg.regular_prompts, "ref_budget": cfg.paper_ref_budget,
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
    p.add_argument("--trace-prompts", type=int, default=None, help=f"tdes-pool prompts to trace (default {d.trace_prompts})")
    p.add_argument("--trace-minutes", type=float, default=None, help="start no new trace shard after this many "
                   "minutes (a re-run goes on)")
    p.add_argument("--task-scorers", nargs="+", default=None, metavar="TASK", help="also train a scorer on each "
                   "task's traces only (tdes-TASK.*; the shipped gsm8k scorer: --task-scorers gsm8k)")
    p.add_argument("--val-prompts", type=int, default=None, help=f"validation prompts for SABA (default {d.val_prompts})")
    p.add_argument("--regular-prompts", type=int, default=None, help="prompts of the regular set's validation split "
                   f"replayed for SABA beside them (default {d.regular_prompts})")
    p.add_argument("--paper-prompts", type=int, default=None, help="validation prompts of step 4, SABA on the paper's "
                   f"grid under its A100 costs (default {d.paper_prompts}; 0: skip it)")
    p.add_argument("--grid", nargs="+", type=int, default=None, help="SABA budget grid (default: "
                   f"{' '.join(map(str, CPU_GRID))} on a CPU, {' '.join(map(str, GPU_GRID))} on a GPU)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--ship", action="store_true", help="then copy the folder's scorers and calibration into the "
                   "shipped assets (the embedded pair only; `graft ship-artifacts`)")
    p.add_argument("--assets", default=None, help=f"where --ship writes (default: {portable(ShippedAssets().root)})")
    p.set_defaults(func=run)


def config_from_args(args) -> PrepareConfig:
    base = QUICK if args.quick else PrepareConfig()
    given = {"trace_prompts": args.trace_prompts, "trace_minutes": args.trace_minutes,
             "val_prompts": args.val_prompts, "regular_prompts": args.regular_prompts,
             "paper_prompts": args.paper_prompts,
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
    out = Path(args.out) if args.out else default_dir(pair.identity())
    manifest = prepare(pair, out, cfg, log=lambda m: print(m, flush=True))
    print(f"\nartifacts of {pair.identity()} on {manifest['hardware']} in {out}:")
    for step, s in manifest["steps"].items():
        print(f"  {step:<7} {s['status']:<5} {'complete' if s['complete'] else 'INCOMPLETE (re-run to go on)':<12} "
              f"{s.get('seconds', 0):>7.1f} s  {s.get('file') or s.get('dir')}")
    print(f"use them: graft generate --target {args.target} --drafter {args.drafter} --artifacts {out} "
          f"--method graft --prompt '...'  (graft bench takes --artifacts too)")
    if args.ship:
        assets = ShippedAssets(Path(args.assets)) if args.assets else ShippedAssets()
        ship(out, pair.identity(), assets, log=lambda m: print(m, flush=True))
    return 0
