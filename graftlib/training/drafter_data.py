"""Drafter training data: the target's own greedy responses, with its features captured on the way.

What a sequence holds. For one training-pool prompt (`data.pool(cfg.pool)`, default "drafter", never an evaluation
prompt), `tokens` = prompt + the target's greedy response (stopped at EOS, which is kept, or at
`max_response_tokens`), `prompt_len`, and `features` = the target's hidden states after the
layers `target_layer_ids` (HF `hidden_states[i + 1]`, concatenated, fp16) for positions
`[0, len(tokens) - 1)`. The last token is never fed to the target, and no training block needs
its features: a block's context is strictly before its anchor, and an anchor needs at least
one label after it.

How it is made. `generate_batch` runs batched greedy decoding on the HF decoder body itself:
left padding with a 2D attention mask and per-row position ids, the buffered KV cache of
`graftlib.kvcache`, the LM head on the last position only. The prefill yields the prompt's
features, each step the fed token's features, so features cost no second pass. Finished rows
are dropped from the batch (their cache rows too) once a quarter of the batch has finished.
Prompts are sorted by length inside a shard so a batch pads little.

On disk (`out/`): `index.json` (the settings every shard shares, and one entry per finished
shard) and `shard-NNNNN.safetensors` holding the shard's sequences back to back: `tokens`
int32 [sum len], `features` fp16 [sum (len - 1), n_layers * hidden], `lengths`, `prompt_lens`
int64 [n]. Shard s covers prompts `[s * shard_size, (s + 1) * shard_size)` of the pool order,
so a re-run skips finished shards (resumable, and a larger `--n-prompts` extends the set);
an index written with other settings (target, layer ids, lengths, shard size) is refused.
"""

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from graftlib.core.errors import GraftError, require
from graftlib.core.kvcache import target_cache
from graftlib.core.records import read_json_index, write_json_atomic

INDEX = "index.json"
FORMAT = 1
# Settings that every shard of one data directory must share.
SHARED_KEYS = ("target", "pool", "target_layer_ids", "hidden_size", "max_prompt_tokens",
               "max_response_tokens", "shard_size")


@dataclass
class DataConfig:
    target: str = "smollm2-135m"
    pool: str = "drafter"
    n_prompts: int = 1024
    max_prompt_tokens: int = 256  # longer prompts have their question cut (data.format_prompt)
    max_response_tokens: int = 192
    batch_size: int = 48
    shard_size: int = 96  # prompts per shard (one log line and one resumable unit each)
    target_layer_ids: list[int] | None = None  # None: the embedded drafter's
    max_minutes: float | None = None  # start no new shard after this


@dataclass
class Sequence:
    tokens: torch.Tensor  # int64 [n]: prompt + response
    prompt_len: int
    features: torch.Tensor  # [n - 1, n_layers * hidden]
    uid: str = ""

    @property
    def response_len(self) -> int:
        return len(self.tokens) - self.prompt_len


@dataclass
class DataIndex:
    target: str
    pool: str
    target_layer_ids: list[int]
    hidden_size: int
    max_prompt_tokens: int
    max_response_tokens: int
    shard_size: int
    format: int = FORMAT
    shards: list[dict] = field(default_factory=list)

    def shared(self) -> dict:
        return {k: getattr(self, k) for k in SHARED_KEYS}

    def totals(self) -> dict:
        keys = ("n_seqs", "prompt_tokens", "response_tokens", "seconds")
        return {k: sum(s[k] for s in self.shards) for k in keys}


def eos_ids(model, tokenizer) -> list[int]:
    """The target's EOS ids: generation config plus the tokenizer's."""
    eos = model.generation_config.eos_token_id
    ids = list(eos) if isinstance(eos, list) else [eos] if eos is not None else []
    if tokenizer is not None and tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def _keep_rows(cache, rows: torch.Tensor) -> None:
    """Drop finished rows from the cache (HF layers and `graftlib.kvcache.BufferedLayer` alike)."""
    for layer in cache.layers:
        layer.batch_select_indices(rows)


@torch.inference_mode()
def generate_batch(model, prompts: list[list[int]], layer_ids: list[int], max_new_tokens: int,
                   eos: list[int], feature_dtype: torch.dtype = torch.float16) -> list[Sequence]:
    """Greedy responses for `prompts` in one left-padded batch, features captured while decoding."""
    require(max_new_tokens >= 1, f"max_response_tokens must be >= 1, got {max_new_tokens}")
    require(all(len(p) > 0 for p in prompts), "empty prompt: nothing to condition on")
    device, eos_set = model.device, set(eos)
    b = len(prompts)
    lens = [len(p) for p in prompts]
    width = max(lens)
    ids = torch.zeros(b, width, dtype=torch.long, device=device)
    pad_mask = torch.zeros(b, width, dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, device=device)
        pad_mask[i, width - len(p):] = 1
    positions = (pad_mask.cumsum(-1) - 1).clamp(min=0)
    cache = target_cache(model.config, width + max_new_tokens)
    out = model.model(input_ids=ids, attention_mask=pad_mask, position_ids=positions, cache=cache,
                      use_cache=True, output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1).to(feature_dtype)
    chunks = [[feats[i, width - n:]] for i, n in enumerate(lens)]
    tokens = [list(p) for p in prompts]
    last = out.last_hidden_state[:, -1]
    rows = list(range(b))  # batch row -> sequence index
    finished = [False] * b
    while True:
        nxt = model.lm_head(last).argmax(-1).tolist()
        for r, s in enumerate(rows):
            if not finished[s]:
                tokens[s].append(nxt[r])
                finished[s] = nxt[r] in eos_set or len(tokens[s]) - lens[s] >= max_new_tokens
        live = [r for r, s in enumerate(rows) if not finished[s]]
        if not live:
            break
        if len(rows) - len(live) >= max(1, len(rows) // 4):
            keep = torch.tensor(live, device=device)
            _keep_rows(cache, keep)
            pad_mask = pad_mask[keep]
            rows = [rows[r] for r in live]
        step_ids = torch.tensor([[tokens[s][-1]] for s in rows], device=device)
        step_pos = torch.tensor([[len(tokens[s]) - 1] for s in rows], device=device)
        pad_mask = torch.cat([pad_mask, pad_mask.new_ones(len(rows), 1)], dim=1)
        out = model.model(input_ids=step_ids, attention_mask=pad_mask, position_ids=step_pos, cache=cache,
                          use_cache=True, output_hidden_states=True)
        feats = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1).to(feature_dtype)
        for r, s in enumerate(rows):
            if not finished[s]:
                chunks[s].append(feats[r])
        last = out.last_hidden_state[:, -1]
    seqs = []
    for s in range(b):
        f = torch.cat(chunks[s], dim=0)
        assert f.shape[0] == len(tokens[s]) - 1, (f.shape, len(tokens[s]))
        seqs.append(Sequence(torch.tensor(tokens[s]), lens[s], f))
    return seqs


def generate_sequences(model, prompts: list[list[int]], layer_ids: list[int], max_new_tokens: int,
                       eos: list[int], batch_size: int, progress=None,
                       feature_dtype: torch.dtype = torch.float16) -> list[Sequence]:
    """`generate_batch` over length-sorted batches; results in the order of `prompts`."""
    require(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[Sequence | None] = [None] * len(prompts)
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        for i, seq in zip(idx, generate_batch(model, [prompts[i] for i in idx], layer_ids, max_new_tokens, eos,
                                                   feature_dtype)):
            out[i] = seq
        if progress is not None:
            progress(len(idx), sum(out[i].response_len for i in idx))
    return out


# ----------------------------------------------------------------------------- storage


def write_shard(path: Path, seqs: list[Sequence]) -> None:
    tensors = {
        "tokens": torch.cat([s.tokens for s in seqs]).to(torch.int32),
        "features": torch.cat([s.features for s in seqs]).to(torch.float16).contiguous(),
        "lengths": torch.tensor([len(s.tokens) for s in seqs], dtype=torch.int64),
        "prompt_lens": torch.tensor([s.prompt_len for s in seqs], dtype=torch.int64),
    }
    tmp = path.with_name(path.name + ".partial")
    save_file(tensors, tmp, metadata={"format": "pt"})
    tmp.replace(path)


def read_shard(path: Path, uids: list[str] | None = None) -> list[Sequence]:
    t = load_file(path)
    lengths, prompt_lens = t["lengths"].tolist(), t["prompt_lens"].tolist()
    tokens, feats = t["tokens"].long(), t["features"]
    seqs, off, foff = [], 0, 0
    for i, (n, p) in enumerate(zip(lengths, prompt_lens)):
        uid = uids[i] if uids else f"{path.stem}/{i}"
        seqs.append(Sequence(tokens[off:off + n], p, feats[foff:foff + n - 1], uid))
        off, foff = off + n, foff + n - 1
    require(off == len(tokens) and foff == len(feats), f"drafter data shard {path} is inconsistent")
    return seqs


def read_index(out: Path) -> DataIndex | None:
    path = Path(out) / INDEX
    raw = read_json_index(path, FORMAT, "drafter data")
    if raw is None:
        return None
    try:
        return DataIndex(**raw)
    except TypeError as e:
        raise GraftError(f"drafter data index {path} is malformed: {e}") from None


def write_index(out: Path, index: DataIndex) -> None:
    write_json_atomic(Path(out) / INDEX, asdict(index))


def load_dataset(out: str | Path, layer_ids: list[int] | None = None) -> tuple[DataIndex, list[Sequence]]:
    """All finished shards of a data directory; `layer_ids` keeps a subset of the stored layers."""
    out = Path(out)
    index = read_index(out)
    require(index is not None and index.shards, f"no drafter data in {out}: run `graft drafter-data --out {out}`")
    stored = index.target_layer_ids
    cols = None
    if layer_ids is not None and list(layer_ids) != stored:
        missing = [i for i in layer_ids if i not in stored]
        require(not missing, f"target layers {missing} are not in the data of {out} (it has {stored})")
        h = index.hidden_size
        cols = torch.cat([torch.arange(stored.index(i) * h, (stored.index(i) + 1) * h) for i in layer_ids])
    seqs = []
    for shard in sorted(index.shards, key=lambda s: s["first"]):
        for s in read_shard(out / shard["file"], shard.get("uids")):
            if cols is not None:
                s.features = s.features[:, cols].contiguous()
            seqs.append(s)
    return index, seqs


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


def build_dataset(out: str | Path, cfg: DataConfig, model, tokenizer, items: list, layer_ids: list[int],
                  log=print) -> DataIndex:
    """Generate the missing shards for the first `cfg.n_prompts` of `items` (data.Item)."""
    from tqdm import tqdm

    from graftlib.data.prompts import format_prompt

    require(cfg.n_prompts >= 1, f"n_prompts must be >= 1, got {cfg.n_prompts}")
    require(cfg.shard_size >= 1, f"shard_size must be >= 1, got {cfg.shard_size}")
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
              "max_response_tokens": cfg.max_response_tokens, "shard_size": cfg.shard_size}
    index = open_index(out, shared)
    n = min(cfg.n_prompts, len(items))
    eos = eos_ids(model, tokenizer)
    done = {s["file"]: s for s in index.shards}
    plan = []
    for first in range(0, n, cfg.shard_size):
        count = min(cfg.shard_size, n - first)
        name = f"shard-{first // cfg.shard_size:05d}.safetensors"
        entry = done.get(name)
        if entry is None or entry["count"] < count or not (out / name).is_file():
            plan.append((name, first, count))
    log(f"drafter data in {out}: {len(index.shards)} shards done, {len(plan)} to make "
        f"({n} prompts of pool '{cfg.pool}', layers {list(layer_ids)})")
    t_start = time.perf_counter()
    bar = tqdm(total=sum(c for _, _, c in plan), unit="prompt", dynamic_ncols=True)
    for name, first, count in plan:
        if cfg.max_minutes is not None and time.perf_counter() - t_start > 60 * cfg.max_minutes:
            log(f"time budget of {cfg.max_minutes} min reached; re-run to continue")
            break
        chunk = items[first:first + count]
        prompts = [format_prompt(item, tokenizer, cfg.max_prompt_tokens).input_ids for item in chunk]
        t0 = time.perf_counter()
        seqs = generate_sequences(model, prompts, layer_ids, cfg.max_response_tokens, eos, cfg.batch_size,
                                  progress=lambda k, _: bar.update(k))
        seconds = time.perf_counter() - t0
        write_shard(out / name, seqs)
        resp = sum(s.response_len for s in seqs)
        entry = {"file": name, "first": first, "count": count, "n_seqs": len(seqs),
                 "prompt_tokens": sum(s.prompt_len for s in seqs), "response_tokens": resp,
                 "eos_stops": sum(int(s.tokens[-1]) in eos for s in seqs), "seconds": round(seconds, 2),
                 "tokens_per_s": round(resp / seconds, 1), "batch_size": cfg.batch_size,
                 "uids": [item.uid for item in chunk]}
        index.shards = [s for s in index.shards if s["file"] != name] + [entry]
        write_index(out, index)
        tot = index.totals()
        bar.write(f"{name}: {len(seqs)} seqs, {resp} response tokens in {seconds:.0f} s "
                  f"({resp / seconds:.0f} tok/s); total {tot['n_seqs']} seqs, {tot['response_tokens']} "
                  f"response tokens")
    bar.close()
    return index


def default_layer_ids() -> list[int]:
    """The embedded drafter's target layers (its config.json ships without weights)."""
    from graftlib.models.drafter import EMBEDDED_DRAFTER_DIR, DFlashConfig

    raw = json.loads((EMBEDDED_DRAFTER_DIR / "config.json").read_text())
    return list(DFlashConfig.from_dict(raw).target_layer_ids)


def make_dataset(out: str | Path, cfg: DataConfig, device: str | None = None) -> DataIndex:
    """Load the target and the prompt pool, then build (or resume) the dataset in `out`."""
    from graftlib.data.prompts import pool
    from graftlib.models.target import load_target

    layer_ids = cfg.target_layer_ids or default_layer_ids()
    items = pool(cfg.pool, limit=cfg.n_prompts)
    model, tokenizer = load_target(cfg.target, device=device)
    return build_dataset(out, cfg, model, tokenizer, items, layer_ids)


def _main(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = DataConfig(target=args.target, pool=args.pool, n_prompts=args.n_prompts, max_prompt_tokens=args.max_prompt_tokens,
                     max_response_tokens=args.max_response_tokens, batch_size=args.batch_size,
                     shard_size=args.shard_size, target_layer_ids=args.target_layer_ids,
                     max_minutes=args.max_minutes)
    index = make_dataset(args.out, cfg, args.device)
    tot = index.totals()
    print(f"drafter data: {tot['n_seqs']} sequences, {tot['prompt_tokens']} prompt + {tot['response_tokens']} "
          f"response tokens in {len(index.shards)} shards ({args.out})")
    return 0


def add_parser(subparsers) -> None:
    d = DataConfig()
    p = subparsers.add_parser(
        "drafter-data", help="generate drafter training data (target greedy responses + features)",
        description="Greedy responses of the target to training-pool prompts, with the target's hidden "
                    "states of the drafter's layers captured while generating; resumable shards.",
    )
    p.add_argument("--out", required=True, help="data directory (re-running skips finished shards)")
    p.add_argument("--target", default=d.target, help=f"target model (default {d.target})")
    p.add_argument("--pool", default=d.pool, help=f"training pool (graftlib.data.POOLS; default {d.pool!r})")
    p.add_argument("--n-prompts", type=int, default=d.n_prompts, help=f"first prompts of the pool (default {d.n_prompts})")
    p.add_argument("--max-prompt-tokens", type=int, default=d.max_prompt_tokens,
                   help=f"cut longer questions to fit (default {d.max_prompt_tokens})")
    p.add_argument("--max-response-tokens", type=int, default=d.max_response_tokens,
                   help=f"response cap (default {d.max_response_tokens})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"generation batch (default {d.batch_size})")
    p.add_argument("--shard-size", type=int, default=d.shard_size, help=f"prompts per shard (default {d.shard_size})")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=None,
                   help="target layers whose features are stored (default: the embedded drafter's)")
    p.add_argument("--max-minutes", type=float, default=None, help="start no new shard after this many minutes")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.set_defaults(func=_main)
