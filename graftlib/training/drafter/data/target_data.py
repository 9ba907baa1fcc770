"""Drafter training data: the target's own responses, with its features and next-token distribution
captured on the way.

A sequence holds, for one training prompt (never an evaluation prompt): `tokens` = prompt + the target's
response (to EOS or `max_response_tokens`), `prompt_len`, `features` (the target's hidden states after
`target_layer_ids`, fp16, positions `[0, len - 1)`) and the top-k of the target's log-softmax at every
response position (`topk_ids`, `topk_logp`; distillation reads them).

Greedy by default; `sample_share` of the prompts (by a hash of the uid) get a response sampled at
`sample_temperature`.

Branches (`branches` = n > 0): each prompt is answered n times, each response after a short sampled prefix
(stored as part of the prompt) and greedy from there, so every training label lies in greedy text.

The responses are decoded by continuous batching (`graftlib.training.drafter.data.batched.generate_sequences`).

On disk: `graftlib.training.drafter.data.store` (the index, shards of tokens and top-k, memory-mapped features).

Details: docs/internals.md, `graftlib.training.drafter.data.target_data`.
"""

import hashlib
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from graftlib.core.errors import require
from graftlib.training.drafter.data.batched import Capture, Sampled, generate_sequences
from graftlib.training.drafter.data.store import (
    SHARED_KEYS,
    DataIndex,
    Sequence,
    features_path,
    read_index,
    read_prompts,
    write_index,
    write_prompts,
    write_shard,
)

# The target's compute dtype while generating. float32 is the target graftlib decodes with, so its
# responses are exactly the greedy ones the drafter will be verified against. bfloat16 runs the same
# weights ~2.5x faster on a CPU with AMX / AVX512-BF16 (batch 128, one thread: 131 vs ~50 response
# tokens/s) and on GPUs, at the price of rounding: measured on the embedded target, the float32 target's
# argmax, teacher-forced over bf16 greedy responses, is the stored token at 98.3% of positions. Those
# responses are still the target's text (as a sampled share is), so they serve as training data; each
# shard records its dtype, the evaluation's greedy references are checked against the float32 target
# in the loop (in-loop tau), and `graft drafter-corpus --to-data` recomputes float32 features and
# top-k from the tokens of any shard.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

@dataclass
class DataConfig:
    target: str = "smollm2-135m"
    pool: str = "drafter"  # or a --prompts file (its path is recorded as the pool)
    n_prompts: int = 1024
    max_prompt_tokens: int = 256  # longer prompts have their question cut (data.format_prompt)
    max_response_tokens: int = 384
    batch_size: int = 48
    shard_size: int = 96  # prompts per shard (one log line and one resumable unit each)
    top_k: int = 16  # target log-probs stored per response position (0: none)
    sample_share: float = 0.0  # share of prompts answered by sampling instead of greedy
    sample_temperature: float = 0.8
    target_layer_ids: list[int] | None = None  # None: the embedded drafter's
    max_minutes: float | None = None  # start no new shard after this
    dtype: str = "float32"  # the target's compute dtype while generating ("bfloat16": see DTYPES)
    branches: int = 0  # > 0: each prompt answered this many times, a sampled prefix then greedy (module doc)
    branch_tokens: int = 32  # the longest sampled prefix of a branch

    def check(self) -> None:
        require(self.n_prompts >= 1, f"n_prompts must be >= 1, got {self.n_prompts}")
        require(self.shard_size >= 1, f"shard_size must be >= 1, got {self.shard_size}")
        require(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        require(self.max_response_tokens >= 1, f"max_response_tokens must be >= 1, got {self.max_response_tokens}")
        require(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}")
        require(0 <= self.sample_share <= 1, f"sample_share must be in [0, 1], got {self.sample_share}")
        require(self.sample_temperature > 0, f"sample_temperature must be > 0, got {self.sample_temperature}")
        require(self.dtype in DTYPES, f"dtype {self.dtype!r} is not one of {sorted(DTYPES)}")
        require(self.branches >= 0, f"branches must be >= 0, got {self.branches}")
        require(self.branch_tokens >= 1, f"branch_tokens must be >= 1, got {self.branch_tokens}")
        require(not (self.branches and self.sample_share),
                "branches and sample_share do not mix: a branch's prefix is sampled, the rest greedy")
        require(self.branch_tokens < self.max_response_tokens or not self.branches,
                f"branch_tokens ({self.branch_tokens}) must be below max_response_tokens ({self.max_response_tokens})")


def eos_ids(model, tokenizer) -> list[int]:
    """The target's EOS ids: generation config plus the tokenizer's."""
    eos = model.generation_config.eos_token_id
    ids = list(eos) if isinstance(eos, list) else [eos] if eos is not None else []
    if tokenizer is not None and tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def sampled(uid: str, share: float) -> bool:
    """Whether the prompt `uid` is answered by sampling: a stable hash of the uid, salted so that it is
    independent of the training split's held-out hash (`samples.heldout_split`), which would
    otherwise make every held-out response a sampled one whenever heldout < share."""
    return share > 0 and int(hashlib.sha256(f"sample/{uid}".encode()).hexdigest()[:8], 16) < share * 2 ** 32


BRANCH = "@branch"


def branch_uid(uid: str, j: int) -> str:
    """The uid of prompt `uid`'s j-th branch (1-based)."""
    return f"{uid}{BRANCH}{j}"


def base_uid(uid: str) -> str:
    """The prompt's own uid (a branch's without its suffix): what the training split hashes."""
    return uid.split(BRANCH, 1)[0]


def branch_prefix(uid: str, longest: int) -> int:
    """The sampled prefix length of branch `uid`: 1 .. `longest`, by a stable hash of the uid."""
    return 1 + int(hashlib.sha256(f"branch/{uid}".encode()).hexdigest()[:8], 16) % longest


def work_items(items: list, cfg: "DataConfig") -> list:
    """The items to answer: the first `cfg.n_prompts` prompts, each as its `cfg.branches` branches side by
    side when branching (a shard then holds `shard_size` branches)."""
    items = items[:cfg.n_prompts]
    if not cfg.branches:
        return items
    return [replace(item, uid=branch_uid(item.uid, j)) for item in items for j in range(1, cfg.branches + 1)]


def as_branch(seq: "Sequence", prefix: int) -> "Sequence | None":
    """`seq` with its first `prefix` response tokens moved into the prompt (their top-k rows dropped);
    None when the response ends inside the prefix or right after it (no label left to train on)."""
    if seq.response_len < prefix + 2:
        return None
    seq.prompt_len += prefix
    if seq.topk_ids is not None:
        seq.topk_ids, seq.topk_logp = seq.topk_ids[prefix:], seq.topk_logp[prefix:]
    return seq


# ----------------------------------------------------------------------------- building


def open_index(out: Path, shared: dict) -> DataIndex:
    """The directory's index, created on first use; refuses one written with other settings."""
    index = read_index(out)
    if index is None:
        out.mkdir(parents=True, exist_ok=True)
        index = DataIndex(**shared)
        write_index(out, index)
        return index
    have = index.shared()
    diff = [f"{k} {have[k]!r} (asked {shared[k]!r})" for k in SHARED_KEYS if have[k] != shared[k]]
    require(not diff, f"drafter data in {out} was made with other settings: {'; '.join(diff)}; "
                      "use another --out directory")
    return index


def shard_done(out: Path, entry: dict | None, count: int) -> bool:
    if entry is None or entry["count"] < count:
        return False
    path = out / entry["file"]
    return path.is_file() and features_path(path).is_file()


def generate_chunk(model, tokenizer, chunk: list, first: int, cfg: DataConfig, layer_ids: list[int],
                   eos: list[int], progress=None) -> tuple[list[Sequence], dict]:
    """The responses to `chunk` (data.Item; prompt indices `first`..), with their uids, and its log
    entry (counts, seconds, tokens/s, uids). The generator is seeded by `first`, so a chunk's sampled
    responses do not depend on what ran before it."""
    from graftlib.data.prompts import format_prompt

    prompts = [format_prompt(item, tokenizer, cfg.max_prompt_tokens).input_ids for item in chunk]
    if cfg.branches:
        temps = [cfg.sample_temperature] * len(chunk)
        prefix = [branch_prefix(item.uid, cfg.branch_tokens) for item in chunk]
    else:
        temps = [cfg.sample_temperature if sampled(item.uid, cfg.sample_share) else 0.0 for item in chunk]
        prefix = None
    gen = torch.Generator(model.device).manual_seed(first)
    t0 = time.perf_counter()
    seqs = generate_sequences(model, prompts, Capture(tuple(layer_ids), cfg.top_k), cfg.max_response_tokens, eos,
                              cfg.batch_size, progress=progress, sampled=Sampled(temps, prefix, gen))
    seconds = time.perf_counter() - t0
    for item, seq in zip(chunk, seqs):
        seq.uid = item.uid
    made = len(seqs)
    if prefix is not None:
        seqs = [b for b in (as_branch(s, k) for s, k in zip(seqs, prefix)) if b is not None]
    resp = sum(seq.response_len for seq in seqs)
    return seqs, {"first": first, "count": len(chunk), "n_seqs": len(seqs),
                  "prompt_tokens": sum(seq.prompt_len for seq in seqs), "response_tokens": resp,
                  "eos_stops": sum(int(seq.tokens[-1]) in eos for seq in seqs), "sampled": sum(t > 0 for t in temps),
                  "dropped": made - len(seqs),
                  "seconds": round(seconds, 2), "tokens_per_s": round(resp / max(seconds, 1e-9), 1),
                  "batch_size": cfg.batch_size, "device": model.device.type, "dtype": cfg.dtype,
                  "uids": [seq.uid for seq in seqs]}  # the stored sequences' (a dropped branch has none)


def build_dataset(out: str | Path, cfg: DataConfig, model, tokenizer, items: list, layer_ids: list[int],
                  log=print) -> DataIndex:
    """Generate the missing shards for the first `cfg.n_prompts` of `items` (data.Item)."""
    from tqdm import tqdm

    cfg.check()
    n_layers = model.config.num_hidden_layers
    bad = [i for i in layer_ids if not 0 <= i < n_layers]
    require(not bad, f"target_layer_ids {bad} out of range for a {n_layers}-layer target")
    need = cfg.max_prompt_tokens + cfg.max_response_tokens
    require(need <= model.config.max_position_embeddings,
            f"max_prompt_tokens + max_response_tokens = {need} exceeds the target's "
            f"{model.config.max_position_embeddings} positions")
    out = Path(out)
    shared = {"target": cfg.target, "pool": cfg.pool, "target_layer_ids": list(layer_ids),
              "hidden_size": model.config.hidden_size, "max_prompt_tokens": cfg.max_prompt_tokens,
              "max_response_tokens": cfg.max_response_tokens, "shard_size": cfg.shard_size, "top_k": cfg.top_k,
              "sample_share": cfg.sample_share, "sample_temperature": cfg.sample_temperature,
              "branches": cfg.branches, "branch_tokens": cfg.branch_tokens}
    index = open_index(out, shared)
    items = work_items(items, cfg)
    n = len(items)
    eos = eos_ids(model, tokenizer)
    done = {s["file"]: s for s in index.shards}
    plan = []
    for first in range(0, n, cfg.shard_size):
        count = min(cfg.shard_size, n - first)
        name = f"shard-{first // cfg.shard_size:05d}.safetensors"
        if not shard_done(out, done.get(name), count):
            plan.append((name, first, count))
    log(f"drafter data in {out}: {len(index.shards)} shards done, {len(plan)} to make "
        f"({n} prompts of pool '{cfg.pool}', layers {list(layer_ids)}, top-{cfg.top_k} log-probs)")
    t_start = time.perf_counter()
    bar = tqdm(total=sum(c for _, _, c in plan), unit="prompt", dynamic_ncols=True)
    for name, first, count in plan:
        if cfg.max_minutes is not None and time.perf_counter() - t_start > 60 * cfg.max_minutes:
            log(f"time budget of {cfg.max_minutes} min reached; re-run to continue")
            break
        seqs, stats = generate_chunk(model, tokenizer, items[first:first + count], first, cfg, layer_ids, eos,
                                     progress=lambda k, _: bar.update(k))
        size = write_shard(out / name, seqs)
        entry = {"file": name, **stats, "bytes": size}
        resp = stats["response_tokens"]
        index.shards = [s for s in index.shards if s["file"] != name] + [entry]
        write_index(out, index)
        tot = index.totals()
        bar.write(f"{name}: {len(seqs)} seqs, {resp} response tokens in {stats['seconds']:.0f} s "
                  f"({stats['tokens_per_s']:.0f} tok/s); total {tot['n_seqs']} seqs, {tot['response_tokens']} "
                  f"response tokens, {tot['bytes'] / 2 ** 30:.2f} GiB")
    bar.close()
    return index


def default_layer_ids() -> list[int]:
    """The embedded drafter's target layers (its config.json ships without weights)."""
    from graftlib.models.drafter import EMBEDDED_DRAFTER_DIR, DFlashConfig

    raw = json.loads((EMBEDDED_DRAFTER_DIR / "config.json").read_text())
    return list(DFlashConfig.from_dict(raw).target_layer_ids)


def data_items(cfg: DataConfig, prompts_file: str | Path | None = None) -> list:
    """The training prompts (data.Item): `cfg.pool`'s first `cfg.n_prompts`, or a prompts file's, which then names
    the pool (`cfg.pool` = "file:NAME")."""
    from graftlib.data.prompts import pool

    if prompts_file is None:
        return pool(cfg.pool, limit=cfg.n_prompts)
    cfg.pool = f"file:{Path(prompts_file).name}"
    return read_prompts(prompts_file)


def make_dataset(out: str | Path, cfg: DataConfig, device: str | None = None,
                 prompts_file: str | Path | None = None) -> DataIndex:
    """Load the target and the prompts (`data_items`), then build (or resume) `out`."""
    from graftlib.models.target import load_target

    layer_ids = cfg.target_layer_ids or default_layer_ids()
    items = data_items(cfg, prompts_file)
    model, tokenizer = load_target(cfg.target, device=device, dtype=DTYPES[cfg.dtype])
    return build_dataset(out, cfg, model, tokenizer, items, layer_ids)


def _main(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.export_prompts:
        from graftlib.data.prompts import pool

        items = pool(args.pool, limit=args.n_prompts)
        write_prompts(args.export_prompts, items)
        print(f"wrote {len(items)} prompts of pool '{args.pool}' to {args.export_prompts}")
        return 0
    require(args.out, "graft drafter-data needs --out (or --export-prompts FILE)")
    cfg = data_config_from_args(args, target_layer_ids=args.target_layer_ids, max_minutes=args.max_minutes)
    index = make_dataset(args.out, cfg, args.device, args.prompts)
    tot = index.totals()
    rate = tot["response_tokens"] / max(tot["seconds"], 1e-9)
    print(f"drafter data: {tot['n_seqs']} sequences, {tot['prompt_tokens']} prompt + {tot['response_tokens']} "
          f"response tokens in {len(index.shards)} shards ({args.out}; {tot['bytes'] / 2 ** 30:.2f} GiB on disk; "
          f"generated at {rate:.0f} response tokens/s)")
    return 0


def add_parser(subparsers) -> None:
    d = DataConfig()
    p = subparsers.add_parser(
        "drafter-data", help="generate drafter training data (target responses + features + top-k log-probs)",
        description="Responses of the target to training-pool prompts (batched greedy; optionally a share "
                    "sampled), with the target's hidden states of the drafter's layers and its top-k "
                    "next-token log-probs captured while generating; resumable shards.",
    )
    p.add_argument("--out", default=None, help="data directory (re-running skips finished shards)")
    add_data_args(p, d)
    p.add_argument("--export-prompts", default=None, metavar="FILE",
                   help="write the first --n-prompts of --pool to FILE (JSONL, .gz to compress) and stop")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=None,
                   help="target layers whose features are stored (default: the embedded drafter's)")
    p.add_argument("--max-minutes", type=float, default=None, help="start no new shard after this many minutes")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.set_defaults(func=_main)


def add_data_args(p, d: DataConfig) -> None:
    """The generation options shared by `graft drafter-data` and `graft drafter-pipeline` (defaults from `d`)."""
    p.add_argument("--target", default=d.target, help=f"target model (default {d.target})")
    p.add_argument("--pool", default=d.pool, help=f"training pool (graftlib.data.prompts.POOLS; default {d.pool!r})")
    p.add_argument("--prompts", default=None, help="read the prompts from this file instead of --pool "
                                                   "(JSONL[.gz] written by --export-prompts)")
    p.add_argument("--n-prompts", type=int, default=d.n_prompts,
                   help=f"first prompts of the pool (default {d.n_prompts})")
    p.add_argument("--max-prompt-tokens", type=int, default=d.max_prompt_tokens,
                   help=f"cut longer questions to fit (default {d.max_prompt_tokens})")
    p.add_argument("--max-response-tokens", type=int, default=d.max_response_tokens,
                   help=f"response cap (default {d.max_response_tokens})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"generation batch (default {d.batch_size})")
    p.add_argument("--shard-size", type=int, default=d.shard_size,
                   help=f"prompts per shard, or per generation chunk in drafter-pipeline (default {d.shard_size})")
    p.add_argument("--top-k", type=int, default=d.top_k,
                   help=f"target log-probs stored per response token for distillation (default {d.top_k}; 0: none)")
    p.add_argument("--sample-share", type=float, default=d.sample_share,
                   help=f"share of prompts answered by sampling (default {d.sample_share})")
    p.add_argument("--sample-temperature", type=float, default=d.sample_temperature,
                   help=f"temperature of the sampled responses (default {d.sample_temperature})")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=d.dtype,
                   help=f"the target's compute dtype while generating (default {d.dtype}; bfloat16: ~2.5x faster "
                        "on CPUs with AMX, 98%% of tokens the float32 target's greedy ones; recorded per shard)")
    p.add_argument("--branches", type=int, default=d.branches,
                   help="answer every prompt this many times, each response a sampled prefix (at --sample-temperature) "
                        f"then greedy, the prefix stored as context (default {d.branches}: off)")
    p.add_argument("--branch-tokens", type=int, default=d.branch_tokens,
                   help=f"the longest sampled prefix of a branch (default {d.branch_tokens})")


def data_config_from_args(args, **extra) -> DataConfig:
    """The `DataConfig` of `add_data_args`' options (plus `extra` fields)."""
    return DataConfig(target=args.target, pool=args.pool, n_prompts=args.n_prompts,
                      max_prompt_tokens=args.max_prompt_tokens, max_response_tokens=args.max_response_tokens,
                      batch_size=args.batch_size, shard_size=args.shard_size, top_k=args.top_k,
                      sample_share=args.sample_share, sample_temperature=args.sample_temperature,
                      dtype=args.dtype, branches=args.branches, branch_tokens=args.branch_tokens, **extra)
