"""Generate target data and train a drafter on it in one process: the accelerator run of the drafter recipe.

Why one process: on a GPU held for minutes, not hours, the separate steps cost more than they do.
`graft drafter-data` writes shards that `graft train-drafter` reads back (gigabytes of features
to disk and back: minutes of start-up), and the
saved data cannot leave the machine anyway. Here the target is loaded once, in float32 (the
dtype the drafter meets when decoding; a bf16 generation made every stored greedy response
disagree with the float32 decode loop's, so the in-loop tau had no reference), responses are
generated in large batches for `data_minutes`, and the sequences go straight to
`dflash_train.train_run`, whose `FlatBlocks` packs batches on the device.

Variants (`--variants d1:0.5:1 h1:0:1 d2:0.5:2`) are trained one after another on the same
sequences for the same time each: the distillation-vs-hard-labels and capacity comparisons at
equal compute on identical data. What comes out: `out/data.json` (the data's size, generation rate
and per-chunk log) and per variant `out/<name>/` with `drafter/` (weights + training.json),
`metrics.jsonl` (train and eval lines: the learning curve) and `checkpoint/` (the data lives only
in the process, so a run is one-shot by design). The prompts are the
training pools' (never an evaluation prompt), read from a `--prompts` file exported on a machine
that has the prompt sets (`graft drafter-data --export-prompts FILE`).

Invariant: nothing here changes what is generated or how it is trained; the same `DataConfig`
and `TrainConfig` on disk-backed data give the same recipe (`target_data.generate_sequences`,
`dflash_train.Trainer`).
"""

import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from graftlib.core.errors import GraftError, require
from graftlib.training.drafter.data.store import Sequence
from graftlib.training.drafter.data.target_data import (
    DataConfig,
    add_data_args,
    data_config_from_args,
    data_items,
    default_layer_ids,
    eos_ids,
    generate_chunk,
    sampled,
    work_items,
)
from graftlib.training.drafter.dflash_init import TrainConfig
from graftlib.training.drafter.dflash_train import add_drafter_args, config_from_args, train_run
from graftlib.training.drafter.samples import heldout_split
from graftlib.training.drafter.training_run import Run, add_loop_args


def generate_for(model, tokenizer, items: list, cfg: DataConfig, layer_ids: list[int],
                 log=print) -> tuple[list[Sequence], list[dict]]:
    """Responses to `items` in chunks of `cfg.shard_size` prompts, no chunk started after `cfg.max_minutes`
    (`drafter_data.generate_chunk`, as `graft drafter-data` makes its shards)."""
    cfg.check()
    minutes = cfg.max_minutes
    eos = eos_ids(model, tokenizer)
    seqs: list[Sequence] = []
    chunks: list[dict] = []
    t_start = time.perf_counter()
    items = work_items(items, cfg)
    for first in range(0, len(items), cfg.shard_size):
        if time.perf_counter() - t_start > 60 * minutes:
            break
        part, stats = generate_chunk(model, tokenizer, items[first:first + cfg.shard_size], first, cfg, layer_ids, eos)
        seqs.extend(part)
        stats.pop("uids")
        chunks.append(stats)
        total = sum(c["response_tokens"] for c in chunks)
        log(f"data: {len(seqs)} seqs, {total} response tokens ({stats['tokens_per_s']:.0f} tok/s on the last "
            f"{stats['count']} prompts), {(time.perf_counter() - t_start) / 60:.1f} min")
    return seqs, chunks


def parse_variant(text: str) -> tuple[str, dict]:
    """'name:distill:layers' (e.g. 'd1:0.5:1') -> (name, TrainConfig overrides)."""
    parts = text.split(":")
    try:
        require(len(parts) == 3 and parts[0].isidentifier(), "")
        return parts[0], {"distill": float(parts[1]), "layers": int(parts[2])}
    except (ValueError, GraftError):
        raise GraftError(f"variant {text!r} is not NAME:DISTILL:LAYERS (e.g. d1:0.5:1)") from None


def run(out_dir: str | Path, data_cfg: DataConfig, train_cfg: TrainConfig, prompts_file: str | Path | None = None,
        device: str | None = None, variants: list[str] | None = None, log=print,
        command: str | None = None) -> dict[str, Path]:
    """Generate for `data_cfg.max_minutes`, then train each variant (default: `train_cfg` as given, named 'main')
    for `train_cfg.minutes` on the same sequences, into `out/<name>/`; returns name -> drafter directory."""
    from graftlib.models.target import default_device, load_target

    data_minutes = data_cfg.max_minutes
    require(data_minutes is not None and data_minutes > 0, f"the data's minutes must be > 0, got {data_minutes}")
    require(data_cfg.dtype == "float32", f"drafter-pipeline generates with the float32 target, whose model also "
            f"trains the drafter (its embeddings and LM head), not --dtype {data_cfg.dtype}: generate bf16 data "
            "with `graft drafter-data --dtype bfloat16` and train on it with `graft train-drafter`")
    plans = [parse_variant(v) for v in variants] if variants else [("main", {})]
    names = [n for n, _ in plans]
    require(len(set(names)) == len(names), f"variant names repeat: {names}")
    device = device or default_device()
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True  # float32 weights, tensor-core matmuls
        torch.backends.cudnn.allow_tf32 = True
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    layer_ids = data_cfg.target_layer_ids or default_layer_ids()
    items = data_items(data_cfg, prompts_file)
    model, tokenizer = load_target(data_cfg.target, device=device, dtype=torch.float32)
    seqs, chunks = generate_for(model, tokenizer, items, data_cfg, layer_ids, log)
    gen_s = sum(c["seconds"] for c in chunks)
    resp = sum(c["response_tokens"] for c in chunks)
    data = {"dirs": [], "pools": [data_cfg.pool], "sequences": len(seqs),
            "prompt_tokens": sum(s.prompt_len for s in seqs), "response_tokens": resp,
            "max_response_tokens": data_cfg.max_response_tokens, "generation_s": round(gen_s, 1),
            "generation_tokens_per_s": round(resp / max(gen_s, 1e-9), 1), "stored_layer_ids": layer_ids,
            "in_memory": True, "config": asdict(data_cfg)}
    (out / "data.json").write_text(json.dumps({**data, "chunks": chunks}, indent=1) + "\n")
    log(f"data done: {len(seqs)} sequences, {resp} response tokens in {gen_s:.0f} s "
        f"({resp / max(gen_s, 1e-9):.0f} tok/s)")
    sampled_uids = frozenset(s.uid for s in seqs if sampled(s.uid, data_cfg.sample_share))
    finals = {}
    for name, overrides in plans:
        cfg = replace(train_cfg, **overrides)
        log(f"training variant {name} {overrides or ''}")
        train, held = heldout_split(seqs, cfg.heldout)
        run_ = Run([], [], seqs, cfg.target_layer_ids or layer_ids, train, held, model, eos_ids(model, tokenizer),
                   sampled_uids, 0.0, described=data, target_name=data_cfg.target)
        finals[name] = train_run(run_, out / name, cfg, log=log, command=command)
    return finals


def _main(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    data_cfg = data_config_from_args(args, max_minutes=args.data_minutes)
    run(args.out, data_cfg, config_from_args(args), args.prompts, args.device, args.variants,
        command="graft " + " ".join(sys.argv[1:]))
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "drafter-pipeline", help="generate target data and train a drafter on it in one process (GPU runs)",
        description="Target responses (batched, features + top-k log-probs) for --data-minutes, kept in memory, "
                    "then the drafter trained on them for --minutes (the recipe of graft train-drafter).",
    )
    p.add_argument("--data-minutes", type=float, required=True, help="generation time budget")
    # the accelerator's sizes: 512-token responses, large batches and chunks, a tenth sampled
    add_data_args(p, DataConfig(n_prompts=100000, max_response_tokens=512, batch_size=1024, shard_size=2048,
                                sample_share=0.1))
    p.add_argument("--variants", nargs="+", default=None, metavar="NAME:DISTILL:LAYERS",
                   help="drafters trained one after another on the same data, --minutes each, into OUT/NAME "
                        "(e.g. d1:0.5:1 h1:0:1 d2:0.5:2: distilled vs hard labels at equal time, and a second "
                        "layer; default: one run named 'main' with the options given)")
    d = TrainConfig()
    add_loop_args(p, d, data=False)
    add_drafter_args(p, d)
    p.set_defaults(func=_main)
