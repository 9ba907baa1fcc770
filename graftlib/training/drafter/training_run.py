"""A drafter training run, shared by the DFlash and EAGLE-3 trainers: `begin`, `prepare_run`, `run_loop`,
`training_record` (the data and the frozen target; the step / evaluate / checkpoint loop under the time
budget; SIGTERM or SIGINT ends it after the current step with a checkpoint, also in a background job
whose shell ignores SIGINT: `stop_requests`; the `training.json` record), `evaluate_only` (a checkpoint
scored on other data, `--eval-data`), and the shared command-line options (`add_loop_args`,
`loop_config_kwargs`, `run_command`). Checkpoints and resuming: `graftlib.training.drafter.trainer`.
"""

import contextlib
import json
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import portable
from graftlib.core.records import append_record, keep_records
from graftlib.training.drafter.data.store import Sequence
from graftlib.training.drafter.data.target_data import eos_ids, sampled
from graftlib.training.drafter.samples import heldout_split, load_data, n_anchors
from graftlib.training.drafter.trainer import RESUMABLE_CHANGES, LoopConfig, LoopTrainer

# ----------------------------------------------------------------------------- the run


@dataclass
class Run:
    """A training run's inputs: the data, its split, the frozen target."""

    data_dirs: list
    indexes: list
    seqs: list[Sequence]
    layer_ids: list[int]
    train: list[Sequence]
    heldout: list[Sequence]
    target: object
    eos: list[int]
    sampled_uids: frozenset[str]
    load_s: float
    eval_dirs: list | None = None  # evaluate-only: the held-out sequences are these directories' (all of them)
    described: dict | None = None  # data generated in this process (no index): its training.json "data"
    target_name: str | None = None

    @property
    def data_info(self) -> dict:
        return {"sequences": len(self.seqs), "train_sequences": len(self.train)}


def prepare_run(data_dir, cfg: LoopConfig, device: str, eval_data: list | None = None) -> Run:
    """Load one or more `graft drafter-data` directories, split them, and load their target. With
    `eval_data` (directories of the same target and layers), every usable sequence there is the held-out
    set instead (an evaluate-only run: `evaluate_only`)."""
    from graftlib.models.target import load_target

    cfg.check()
    data_dirs = list(data_dir) if isinstance(data_dir, (list, tuple)) else [data_dir]
    t0 = time.perf_counter()
    indexes, seqs = load_data(data_dirs, cfg.target_layer_ids)
    train, held = heldout_split(seqs, cfg.heldout)
    sampled_uids = frozenset(s.uid for ix in indexes for s in seqs if sampled(s.uid, ix.sample_share))
    if eval_data:
        ev_indexes, ev_seqs = load_data(list(eval_data), cfg.target_layer_ids)
        ev, first = ev_indexes[0], indexes[0]
        require(ev.target == first.target and ev.target_layer_ids == first.target_layer_ids,
                f"evaluation data {eval_data[0]} ({ev.target}, layers {ev.target_layer_ids}) does not match the "
                f"training data ({first.target}, layers {first.target_layer_ids})")
        held = [s for s in ev_seqs if n_anchors(s) > 0]
        require(held, f"no usable sequences in the evaluation data {eval_data}")
        seqs = seqs + ev_seqs
        sampled_uids |= {s.uid for ix in ev_indexes for s in ev_seqs if sampled(s.uid, ix.sample_share)}
    target, tokenizer = load_target(indexes[0].target, device=device, dtype=torch.float32)
    if target.device.type != "cpu":  # features (memory-mapped on disk) move to the accelerator once
        for s in seqs:
            s.features = s.features.to(target.device, non_blocking=True)
    return Run(data_dirs, indexes, seqs, cfg.target_layer_ids or indexes[0].target_layer_ids, train, held, target,
               eos_ids(target, tokenizer), sampled_uids, time.perf_counter() - t0, eval_data)


@dataclass
class Started:
    """What `begin` hands a trainer's `train`: the trainer and its run, the output paths, and for an
    evaluate-only run the evaluation record's path (then there is nothing left to do)."""

    trainer: LoopTrainer
    run: Run
    ckpt: Path
    metrics: Path
    final: Path
    eval_path: Path | None = None


def begin(data_dir, out_dir, cfg: LoopConfig, resume: bool, device: str, eval_data: list | None,
          make_trainer, log) -> Started:
    """A run's start, shared by the trainers: output paths, data and target, `make_trainer(cfg, run)`,
    then either the evaluate-only run (`eval_data`; the checkpoint's own settings, except those a
    resume may change) or the resume of out/checkpoint."""
    ckpt, metrics, final = output_dirs(out_dir, resume or bool(eval_data))
    if eval_data:
        cfg = checkpoint_config(ckpt, cfg)
    t_start = time.perf_counter()
    run = prepare_run(data_dir, cfg, device, eval_data)
    trainer = make_trainer(cfg, run)
    if eval_data:
        return Started(trainer, run, ckpt, metrics, final, evaluate_only(trainer, ckpt, run, log))
    if resume:
        resume_from(trainer, ckpt, run, log, metrics)
    log(f"start-up: data + target {run.load_s:.0f} s, trainer {time.perf_counter() - t_start - run.load_s:.0f} s")
    return Started(trainer, run, ckpt, metrics, final)


def checkpoint_config(ckpt: Path, cfg: LoopConfig) -> LoopConfig:
    """`cfg` with the checkpoint's settings, except the ones a resumed run may change."""
    try:
        saved = json.loads((Path(ckpt) / "state.json").read_text())["config"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise GraftError(f"cannot read checkpoint {ckpt}: {e}") from None
    now = asdict(cfg)
    return type(cfg)(**{**now, **{k: v for k, v in saved.items() if k in now and k not in RESUMABLE_CHANGES}})


def output_dirs(out: str | Path, resume: bool) -> tuple[Path, Path, Path]:
    """(checkpoint/, metrics.jsonl, drafter/) under `out`, refusing to overwrite or to resume nothing."""
    out = Path(out)
    ckpt = out / "checkpoint"
    require(resume or not ckpt.exists(), f"{ckpt} exists: pass --resume to continue it, or choose another --out")
    require(not resume or ckpt.exists(), f"nothing to resume: {ckpt} does not exist")
    out.mkdir(parents=True, exist_ok=True)
    return ckpt, out / "metrics.jsonl", out / "drafter"


def resume_from(trainer: LoopTrainer, ckpt: Path, run: Run, log, metrics: Path) -> None:
    """Load the checkpoint and forget the `metrics` records of the steps after it: the run repeats those
    steps, so its records end as an uninterrupted run's (one per logged step and evaluation). Every
    record up to the checkpoint's step was written before the checkpoint (`_run_loop` evaluates, then
    saves), so none of those is lost."""
    state = trainer.load_checkpoint(ckpt)
    dropped = keep_records(metrics, lambda r: r.get("step", 0) <= trainer.step_no)
    log(f"resumed {ckpt} at step {trainer.step_no} ({trainer.elapsed_s / 60:.1f} min trained)"
        + (f"; {dropped} records of the steps after it dropped from {metrics.name}" if dropped else ""))
    if state.get("data") != run.data_info:
        log(f"note: the data changed since the checkpoint ({state.get('data')} -> {run.data_info})")


def evaluate_only(trainer: LoopTrainer, ckpt: Path, run: Run, log) -> Path:
    """Load the checkpoint, evaluate it on `run`'s evaluation data, write `eval-<first dir name>.json`
    beside the checkpoint (the evaluation, its data and the checkpoint's step); returns its path."""
    require(ckpt.exists(), f"nothing to evaluate: {ckpt} does not exist")
    trainer.load_checkpoint(ckpt)
    record = {**trainer.evaluate(), "eval_data": [portable(d) for d in run.eval_dirs],
              "heldout_sequences": len(run.heldout), "greedy_sequences": len(trainer.greedy_heldout),
              "eval_blocks": trainer.cfg.eval_blocks, "checkpoint": portable(ckpt)}
    log(eval_line(record))
    path = ckpt.parent / f"eval-{Path(run.eval_dirs[0]).name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def eval_line(e: dict) -> str:
    acc = e["acc_by_depth"]
    picks = ", ".join(f"d{d} {acc[d - 1]:.2f}" for d in (1, 2, 4, 8) if d <= len(acc))
    data = f", matches data {e['tau_matches_data']}" if "tau_matches_data" in e else ""
    loop = f", loop tau {e['tau']:.2f} (exact {e.get('tau_exact')}{data})" if "tau" in e else ""
    ce = f" (hard CE {e['heldout_ce']:.3f})" if "heldout_ce" in e else ""
    seen = (f"; seen text: hard CE {e['seen_ce']:.3f}, top-1 d1 {e['seen_acc_by_depth'][0]:.2f}"
            if "seen_ce" in e else "")
    pools = e.get("by_pool") or {}
    seen_pools = e.get("seen_by_pool") or {}
    by_pool = "; by pool (held-out / seen top-1 d1, offline tau): " + ", ".join(
        f"{name} {p['top1_d1']:.2f}/{seen_pools[name]['top1_d1']:.2f} {p['offline_tau']:.1f}/"
        f"{seen_pools[name]['offline_tau']:.1f}" if name in seen_pools else
        f"{name} {p['top1_d1']:.2f} {p['offline_tau']:.1f}" for name, p in pools.items()) if pools else ""
    return (f"eval @ step {e['step']}: held-out loss {e['heldout_loss']:.3f}{ce}, top-1 {picks}, offline tau "
            f"{e['offline_tau']:.2f}{loop}{seen}{by_pool}, {e['eval_s']:.0f} s")


@contextlib.contextmanager
def stop_requests():
    """A list that SIGTERM and SIGINT append their number to while the block runs (handlers restored
    after). The loop polls it between steps, so a stop never lands inside a step or a checkpoint
    write; SIGINT is caught even where the shell that started a background job set it to ignored.
    Off the main thread (where Python cannot install handlers) the list stays empty."""
    requests: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, lambda signum, frame: requests.append(signum)) for s in signals}
    try:
        yield requests
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_loop(trainer: LoopTrainer, ckpt: Path, metrics: Path, data_info: dict, log) -> dict:
    """Steps until the budget (minutes of training + evaluation on the trainer's clock, or max_steps;
    max_steps 0 with a warm start: its step-0 evaluation only, the way to score a trained drafter on
    another run's held-out anchors); logs, evaluates at step 0 of a warm start and every
    `eval_every` steps, checkpoints at each evaluation and every `checkpoint_minutes`, and when a stop
    is requested (`stop_requests`): then it raises KeyboardInterrupt after the checkpoint.
    Returns the final evaluation (made at the last step if the last periodic one was earlier)."""
    with stop_requests() as stops:
        return _run_loop(trainer, ckpt, metrics, data_info, log, stops)


def _run_loop(trainer: LoopTrainer, ckpt: Path, metrics: Path, data_info: dict, log, stops: list[int]) -> dict:
    cfg = trainer.cfg
    last_eval: dict = {}
    last_ckpt = time.perf_counter()

    def evaluate() -> dict:  # with the blocks and labels seen so far: the learning curve's x axis
        return {**trainer.evaluate(), "blocks_seen": trainer.blocks_seen, "labels_seen": trainer.labels_seen}

    def done() -> bool:
        if cfg.max_steps is not None and trainer.step_no >= cfg.max_steps:
            return True
        return cfg.minutes is not None and trainer.elapsed_s >= 60 * cfg.minutes

    require(cfg.max_steps != 0 or trainer.warm_start,
            "max_steps 0 trains nothing: it evaluates a warm start on this run's held-out split (give --init-drafter)")
    if trainer.warm_start and trainer.step_no == 0:  # where a warm start begins: the curve's first point
        t0 = trainer.now()
        last_eval = evaluate()
        append_record(metrics, last_eval)
        trainer.elapsed_s += trainer.now() - t0
    try:
        while not done():
            if stops:
                raise KeyboardInterrupt(f"signal {stops[0]}")
            rec = trainer.step()
            if trainer.step_no % cfg.log_every == 0:
                rec = {"kind": "train", "elapsed_s": round(trainer.elapsed_s, 1), **rec}
                append_record(metrics, rec)
                log(f"step {rec['step']}: loss {rec['loss']:.3f} acc {rec['acc']:.3f} lr {rec['lr']:.2e} "
                    f"{rec['blocks_per_s']:.0f} blocks/s, {trainer.elapsed_s / 60:.1f} min")
            if trainer.step_no % cfg.eval_every == 0:
                t0 = trainer.now()
                last_eval = evaluate()
                append_record(metrics, last_eval)
                log(eval_line(last_eval))
                trainer.save_checkpoint(ckpt, {"data": data_info})
                last_ckpt = time.perf_counter()
                trainer.elapsed_s += trainer.now() - t0  # evaluation counts against the budget
            elif time.perf_counter() - last_ckpt > 60 * cfg.checkpoint_minutes:
                trainer.save_checkpoint(ckpt, {"data": data_info})
                last_ckpt = time.perf_counter()
    except KeyboardInterrupt:
        trainer.save_checkpoint(ckpt, {"data": data_info})
        log(f"interrupted: checkpoint saved at step {trainer.step_no}; continue with --resume")
        raise
    if last_eval.get("step") != trainer.step_no:
        last_eval = evaluate()
        append_record(metrics, last_eval)
        log(eval_line(last_eval))
    trainer.save_checkpoint(ckpt, {"data": data_info})
    return last_eval


def training_record(trainer: LoopTrainer, run: Run, draft_vocab_size: int, wall_s: float, final_eval: dict,
                    command: str | None) -> dict:
    """The `training.json` record: hardware, data, split, work done, config, final evaluation, command."""
    from graftlib.models import hardware

    anchors = int(trainer.weights.sum())
    data, target = run.described, run.target_name
    if data is None:
        index = run.indexes[0]
        tots = [ix.totals() for ix in run.indexes]
        tot = {k: sum(t[k] for t in tots) for k in ("n_seqs", "prompt_tokens", "response_tokens", "seconds")}
        target = index.target
        data = {"dirs": [portable(d) for d in run.data_dirs], "pools": [ix.pool for ix in run.indexes],
                "sequences": tot["n_seqs"], "prompt_tokens": tot["prompt_tokens"],
                "response_tokens": tot["response_tokens"], "max_response_tokens": index.max_response_tokens,
                "generation_s": tot["seconds"], "stored_layer_ids": index.target_layer_ids}
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "hardware": hardware(trainer.device), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "target": target, "data": data,
        "split": {"train_sequences": len(run.train), "heldout_sequences": len(run.heldout), "train_anchors": anchors},
        "steps": trainer.step_no, "blocks_seen": trainer.blocks_seen, "labels_seen": trainer.labels_seen,
        "epochs_over_anchors": round(trainer.blocks_seen / max(anchors, 1), 3),
        "train_s": round(trainer.elapsed_s, 1), "wall_s_this_run": round(wall_s, 1),
        "process_cpu_s_this_run": round(time.process_time(), 1),  # CPU time of this process (shared machines)
        "draft_vocab_size": draft_vocab_size, "config": asdict(trainer.cfg), "final_eval": final_eval,
        "command": command,
    }


# ----------------------------------------------------------------------------- command line


def add_loop_args(p, d: LoopConfig, data: bool = True) -> None:
    """The options every drafter trainer takes (defaults from `d`; `data`: --data and --resume too)."""
    if data:
        p.add_argument("--data", required=True, nargs="+", help="one or more directories written by `graft "
                                                                "drafter-data`")
    p.add_argument("--out", required=True, help="output directory (checkpoint/, metrics.jsonl, drafter/)")
    p.add_argument("--minutes", type=float, default=d.minutes,
                   help=f"time budget; the lr schedule follows it (default {d.minutes})")
    p.add_argument("--max-steps", type=int, default=None, help="step budget (with --minutes: whichever ends first)")
    p.add_argument("--clock", default=d.clock, choices=("wall", "cpu"),
                   help=f"what --minutes counts: wall time or this process's CPU time, for equal compute on a "
                        f"shared machine (default {d.clock})")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=None,
                   help="target layers used as context (a subset of the data's; default: all of them)")
    p.add_argument("--draft-vocab", type=int, default=d.draft_vocab,
                   help=f"draft vocabulary size, 0 = full target vocabulary (default {d.draft_vocab})")
    p.add_argument("--blocks-per-step", type=int, default=d.blocks_per_step,
                   help=f"anchors (blocks of drafts) per step (default {d.blocks_per_step})")
    p.add_argument("--blocks-per-seq", type=int, default=d.blocks_per_seq,
                   help=f"anchors packed into one sequence's row (default {d.blocks_per_seq})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr})")
    p.add_argument("--eval-every", type=int, default=d.eval_every,
                   help=f"steps between evaluations (default {d.eval_every})")
    p.add_argument("--eval-blocks", type=int, default=d.eval_blocks,
                   help=f"held-out anchors evaluated (default {d.eval_blocks})")
    p.add_argument("--eval-blocks-per-seq", type=int, default=None,
                   help="the held-out anchors' grouping per row (default: --blocks-per-seq); give another recipe's "
                        "--blocks-per-seq to score exactly its held-out anchors")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast (default: bf16 where it is native)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast even where it is emulated (slow on AVX2 CPUs)")
    p.add_argument("--schedule", default=d.schedule, choices=("wsd", "cosine", "linear"),
                   help=f"lr schedule (default {d.schedule}: warmup, plateau, decay over the last --decay)")
    p.add_argument("--decay", type=float, default=d.decay,
                   help=f"wsd: decaying fraction of the run (default {d.decay})")
    p.add_argument("--distill", type=float, default=d.distill,
                   help=f"weight of the soft loss on the target's stored top-k log-probs (default {d.distill})")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help=f"AdamW weight decay of the weight matrices (default {d.weight_decay})")
    p.add_argument("--feature-dropout", type=float, default=d.feature_dropout,
                   help=f"dropout on the target's context features while training, against memorizing the data "
                        f"(default {d.feature_dropout}: off)")
    p.add_argument("--checkpoint-minutes", type=float, default=d.checkpoint_minutes,
                   help=f"checkpoint at least this often (default {d.checkpoint_minutes})")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--seed", type=int, default=d.seed)
    if data:
        p.add_argument("--resume", action="store_true", help="continue out/checkpoint")
        p.add_argument("--eval-data", nargs="+", default=None, metavar="DIR",
                       help="no training: evaluate out/checkpoint on every sequence of these drafter-data directories "
                            "(same target and layers) and write out/eval-<DIR>.json")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")


def loop_config_kwargs(args) -> dict:
    """The `LoopConfig` fields given by `add_loop_args`' options."""
    return dict(target_layer_ids=args.target_layer_ids, draft_vocab=args.draft_vocab,
                blocks_per_step=args.blocks_per_step, blocks_per_seq=args.blocks_per_seq, lr=args.lr,
                eval_every=args.eval_every, eval_blocks=args.eval_blocks,
                eval_blocks_per_seq=args.eval_blocks_per_seq, minutes=args.minutes,
                max_steps=args.max_steps, clock=args.clock, bf16=False if args.fp32 else True if args.bf16 else None,
                seed=args.seed, schedule=args.schedule, decay=args.decay, distill=args.distill,
                weight_decay=args.weight_decay, feature_dropout=args.feature_dropout,
                checkpoint_minutes=args.checkpoint_minutes)


def run_command(args, train_fn, cfg: LoopConfig) -> int:
    """A trainer's `_main`: threads, device, then `train_fn(data, out, cfg, resume=, device=, command=, eval_data=)`."""
    from graftlib.models.target import default_device

    if args.threads:
        torch.set_num_threads(args.threads)
    train_fn(args.data, args.out, cfg, resume=args.resume, device=args.device or default_device(),
             command="graft " + " ".join(sys.argv[1:]), eval_data=args.eval_data)
    return 0
