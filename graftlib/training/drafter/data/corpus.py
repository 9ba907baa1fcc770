"""The token corpus of drafter data: what `graft drafter-data` generated, without what can be recomputed.

Generating the target's responses is the expensive part of drafter data; the features and top-k log-probs
are a function of the tokens (one causal forward over prompt + response). A corpus keeps the tokens only
(4 bytes a token), so it is committed (`data/corpus/<target>[-<pool>]`) and `featurize` turns it back into a
`graftlib.training.drafter.data.target_data` directory on any machine, for any stored layers and top-k.

`export(data_dir, corpus)`: the data index's shared settings and per-shard entries (generation stats,
uids) in `index.json`, and per shard `shard-NNNNN.tokens.safetensors` (`tokens` int32, `lengths`,
`prompt_lens` int64). Shards already exported are skipped, so exporting a growing data directory
adds only its new shards.

`featurize(corpus, out)`: the missing shards of `out` only (resumable). Sequences sorted by length are
right-padded into batches (causal attention: no mask needed); each shard entry records `top1_match`, the
share of the stored greedy tokens that are the recomputed top-1 (1 up to near-ties).

Details: docs/internals.md, `graftlib.training.drafter.data.corpus`.
"""

import time
from dataclasses import MISSING
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from graftlib.core.errors import require
from graftlib.core.paths import PROJECT_DIR
from graftlib.core.records import read_json_index, write_json_atomic
from graftlib.training.drafter.data.store import (
    SHARED_KEYS,
    DataIndex,
    Sequence,
    read_index,
    token_tensors,
    write_index,
    write_shard,
)
from graftlib.training.drafter.data.target_data import DTYPES, open_index, sampled, shard_done

FORMAT = "corpus-1"
INDEX = "index.json"
CORPUS_ROOT = PROJECT_DIR / "data" / "corpus"  # the repository's, not the installed package's: decoding needs none
SHIPPED_CORPUS = CORPUS_ROOT / "smollm2-135m"  # the `drafter` pool's; others sit beside it


def shipped_corpora() -> list[Path]:
    """Every committed corpus (`data/corpus/*/index.json` of the repository), one per pool and target."""
    return sorted(p.parent for p in CORPUS_ROOT.glob(f"*/{INDEX}"))
ENTRY_DROP = ("bytes", "featurize_s", "top1_match")  # per-shard fields of a data index a corpus does not keep


def tokens_path(corpus: Path, shard_file: str) -> Path:
    return Path(corpus) / shard_file.replace(".safetensors", ".tokens.safetensors")


def read_corpus(corpus: str | Path) -> dict:
    corpus = Path(corpus)
    index = _read_index(corpus)
    require(index is not None, f"no drafter corpus in {corpus} (the committed ones are in the repository's "
                               "data/corpus, "
            "not in an installed package; write one with `graft drafter-corpus --from-data DIR`)")
    return index


def _read_index(corpus: Path) -> dict | None:
    """The corpus index, with the defaults of settings added to `DataIndex` after it was written (a corpus
    exported before branches existed has none: its data had `branches` 0)."""
    index = read_json_index(corpus / INDEX, FORMAT, "drafter corpus")
    if index is None:
        return None
    late = {k: f.default for k, f in DataIndex.__dataclass_fields__.items() if k in SHARED_KEYS and k not in index
            and f.default is not MISSING}
    return {**late, **index}


def export(data_dir: str | Path, corpus: str | Path, log=print) -> dict:
    """Add the shards of `data_dir` that `corpus` lacks; returns the corpus index."""
    from graftlib.training.drafter.data.store import read_shard

    data_dir, corpus = Path(data_dir), Path(corpus)
    data = read_index(data_dir)
    require(data is not None and data.shards, f"no drafter data in {data_dir}: run `graft drafter-data --out "
                                              f"{data_dir}`")
    shared = data.shared()
    old = _read_index(corpus)
    if old is None:
        corpus.mkdir(parents=True, exist_ok=True)
        old = {"format": FORMAT, **shared, "shards": []}
    diff = [f"{k} {old[k]!r} (data {shared[k]!r})" for k in SHARED_KEYS
            if k != "target_layer_ids" and old[k] != shared[k]]
    require(not diff, f"corpus {corpus} holds data made with other settings: {'; '.join(diff)}")
    have = {s["file"]: s for s in old["shards"]}
    added = 0
    for entry in sorted(data.shards, key=lambda s: s["first"]):
        prev = have.get(entry["file"])
        if prev is not None and prev["count"] >= entry["count"] and tokens_path(corpus, entry["file"]).is_file():
            continue
        seqs = read_shard(data_dir / entry["file"], entry.get("uids"))
        tensors = token_tensors(seqs)
        path = tokens_path(corpus, entry["file"])
        tmp = path.with_name(path.name + ".partial")
        save_file(tensors, tmp, metadata={"format": "pt"})
        tmp.replace(path)
        have[entry["file"]] = {k: v for k, v in entry.items() if k not in ENTRY_DROP}
        added += 1
    old["shards"] = sorted(have.values(), key=lambda s: s["first"])
    old["target_layer_ids"] = None  # a corpus has no features: featurize chooses the layers
    write_json_atomic(corpus / INDEX, old)
    tot = sum(s["response_tokens"] for s in old["shards"])
    log(f"corpus {corpus}: {added} shards added, {len(old['shards'])} in all, {tot} response tokens")
    return old


def corpus_sequences(corpus: Path, entry: dict) -> list[Sequence]:
    """A corpus shard's sequences (tokens, prompt lengths and uids; no features yet)."""
    t = load_file(tokens_path(corpus, entry["file"]))
    lengths, prompt_lens = t["lengths"].tolist(), t["prompt_lens"].tolist()
    uids = entry.get("uids") or [f"{entry['file']}/{i}" for i in range(len(lengths))]
    require(len(uids) == len(lengths) and sum(lengths) == len(t["tokens"]),
            f"corpus shard {entry['file']} in {corpus} is inconsistent")
    tokens, seqs, off = t["tokens"].long(), [], 0
    for n, p, uid in zip(lengths, prompt_lens, uids):
        seqs.append(Sequence(tokens[off:off + n], p, torch.empty(0), uid))
        off += n
    return seqs


@torch.inference_mode()
def featurize_sequences(model, seqs: list[Sequence], layer_ids: list[int], top_k: int,
                        max_batch_tokens: int | None = None) -> None:
    """Fill each sequence's `features` (fp16) and top-k rows in place (see the module doc)."""
    device = model.device
    max_batch_tokens = max_batch_tokens or batch_tokens(device)
    k = min(top_k, model.config.vocab_size)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].tokens))
    start = 0
    while start < len(order):
        stop = start + 1  # longest last in the batch: the width is the last one's length - 1
        while stop < len(order) and (stop + 1 - start) * (len(seqs[order[stop]].tokens) - 1) <= max_batch_tokens:
            stop += 1
        batch = [seqs[i] for i in order[start:stop]]
        width = len(batch[-1].tokens) - 1
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        for r, s in enumerate(batch):
            ids[r, :len(s.tokens) - 1] = s.tokens[:-1]
        out = model.model(input_ids=ids.to(device), use_cache=False, output_hidden_states=True)
        feats = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)
        for r, s in enumerate(batch):
            n = len(s.tokens)
            s.features = feats[r, :n - 1].to(torch.float16).cpu()
            if k:
                logp = torch.log_softmax(model.lm_head(out.last_hidden_state[r, s.prompt_len - 1:n - 1]).float(), -1)
                top = logp.topk(k, dim=-1)
                s.topk_ids, s.topk_logp = top.indices.to(torch.int32).cpu(), top.values.to(torch.float16).cpu()
        start = stop


def batch_tokens(device: torch.device) -> int:
    """The default padded tokens per featurizing forward: 2048 on a CPU, where a batch's activations then
    stay in cache (8192 ran 1.36x slower on a 2-core AVX2 CPU: the element-wise ops of [8192, 1536] MLP
    activations are memory-bound there), 16384 on an accelerator."""
    return 2048 if torch.device(device).type == "cpu" else 16384


def featurize(corpus: str | Path, out: str | Path, model, layer_ids: list[int], top_k: int | None = None,
              max_batch_tokens: int | None = None, shards: int | None = None, log=print) -> DataIndex:
    """The data directory `out` of the corpus: its missing shards featurized (see the module doc); `shards`:
    only the corpus's first that many (a part one run can afford; a later call with more goes on)."""
    corpus, out = Path(corpus), Path(out)
    c = read_corpus(corpus)  # `model` is the corpus's target (`_main` loads `c["target"]`)
    n_layers = model.config.num_hidden_layers
    bad = [i for i in layer_ids if not 0 <= i < n_layers]
    require(not bad, f"target_layer_ids {bad} out of range for a {n_layers}-layer target")
    top_k = c["top_k"] if top_k is None else top_k
    require(shards is None or shards > 0, f"shards must be a positive number of corpus shards, got {shards}")
    require(top_k >= 0, f"top_k must be >= 0, got {top_k}")
    shared = {k: c[k] for k in SHARED_KEYS} | {"target_layer_ids": list(layer_ids),
                                               "hidden_size": model.config.hidden_size, "top_k": top_k}
    index = open_index(out, shared)
    done = {s["file"]: s for s in index.shards}
    wanted = c["shards"][:shards]
    todo = [e for e in wanted if not shard_done(out, done.get(e["file"]), e["count"])]
    log(f"featurizing corpus {corpus} into {out}: {len(wanted) - len(todo)} of {len(wanted)} shards done, {len(todo)} "
        "to make "
        f"(layers {list(layer_ids)}, top-{top_k})")
    for entry in todo:
        t0 = time.perf_counter()
        seqs = corpus_sequences(corpus, entry)
        top_id = max(int(s.tokens.max()) for s in seqs)
        require(top_id < model.config.vocab_size, f"corpus shard {entry['file']} holds token id {top_id}, outside "
                                                  f"the target's vocabulary of {model.config.vocab_size}")
        featurize_sequences(model, seqs, layer_ids, top_k, max_batch_tokens)
        seconds = time.perf_counter() - t0
        greedy = [s for s in seqs if not sampled(s.uid, c["sample_share"])]
        match = (sum(int((s.tokens[s.prompt_len:] == s.topk_ids[:, 0].long()).sum()) for s in greedy)
                 / max(sum(s.response_len for s in greedy), 1)) if top_k and greedy else None
        size = write_shard(out / entry["file"], seqs)
        new = {**entry, "bytes": size, "featurize_s": round(seconds, 2),
               "top1_match": None if match is None else round(match, 5),
               "featurize_dtype": str(model.dtype).removeprefix("torch.")}
        index.shards = [s for s in index.shards if s["file"] != entry["file"]] + [new]
        write_index(out, index)
        tokens = sum(len(s.tokens) for s in seqs)
        log(f"{entry['file']}: {len(seqs)} seqs, {tokens} tokens in {seconds:.0f} s ({tokens / seconds:.0f} tok/s)"
            + (f", greedy top-1 match {match:.4f}" if match is not None else ""))
    return index


def _main(args) -> int:
    from graftlib.models.target import load_target
    from graftlib.training.drafter.data.target_data import default_layer_ids

    if args.threads:
        torch.set_num_threads(args.threads)
    require(bool(args.from_data) != bool(args.to_data), "give one of --from-data DIR (export) or --to-data DIR "
                                                        "(featurize)")
    if args.from_data:
        export(args.from_data, args.corpus)
        return 0
    c = read_corpus(args.corpus)
    model, _ = load_target(c["target"], device=args.device, dtype=DTYPES[args.dtype])
    index = featurize(args.corpus, args.to_data, model, args.target_layer_ids or default_layer_ids(), args.top_k,
                      args.max_batch_tokens, args.shards)
    tot = index.totals()
    print(f"drafter data {args.to_data}: {tot['n_seqs']} sequences, {tot['response_tokens']} response tokens in "
          f"{len(index.shards)} shards, {tot['bytes'] / 2 ** 30:.2f} GiB")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "drafter-corpus", help="drafter data <-> its token corpus (export the tokens; featurize them back)",
        description="--from-data DIR adds a drafter-data directory's tokens to the corpus; --to-data DIR "
                    "recomputes features and top-k log-probs from the corpus into a drafter-data directory "
                    "(one forward per batch, resumable), instead of generating the responses again.",
    )
    p.add_argument("--corpus", default=str(SHIPPED_CORPUS), help="corpus directory (default: the shipped one, "
                                                                 f"{SHIPPED_CORPUS.name})")
    p.add_argument("--from-data", default=None, metavar="DIR", help="export: add this data directory's shards")
    p.add_argument("--to-data", default=None, metavar="DIR", help="featurize into this data directory")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=None,
                   help="featurize: target layers whose features are stored (default: the embedded drafter's)")
    p.add_argument("--top-k", type=int, default=None, help="featurize: top-k log-probs stored (default: the corpus's)")
    p.add_argument("--max-batch-tokens", type=int, default=None,
                   help="featurize: padded tokens per forward (default: 2048 on a CPU, 16384 on an accelerator)")
    p.add_argument("--shards", type=int, default=None, metavar="N",
                   help="featurize: the corpus's first N shards only (default: all; a later run with more goes on)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                   help="featurize: the target's compute dtype (default float32; bfloat16 is faster on CPUs with AMX, "
                        "recorded per shard)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.set_defaults(func=_main)
