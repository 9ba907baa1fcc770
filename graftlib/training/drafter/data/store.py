"""Drafter training data on disk: the `Sequence` record, the data directory's index, shards and prompt
files (`graftlib.training.drafter.data.target_data` makes them, the trainers and `graft drafter-corpus` read them).

On disk (`out/`): `index.json` (the settings every shard shares, and one entry per finished shard),
and per shard `shard-NNNNN.safetensors` (`tokens` int32 [sum len], `lengths`, `prompt_lens` int64
[n], `topk_ids` int32 / `topk_logp` fp16 [sum response_len, k]) beside `shard-NNNNN.features.npy`
(fp16 [sum (len - 1), n_layers * hidden]), which readers map into memory (`np.load(mmap_mode)`):
training touches only the rows it packs, so millions of tokens of features stay on disk, not in RAM.
Shard s covers prompts `[s * shard_size, (s + 1) * shard_size)` of the pool order, so a re-run skips
finished shards (resumable, and a larger `--n-prompts` extends the set); files are written under a
temporary name and renamed, then the index entry is added, so an interrupted run loses at most the
shard in progress. An index written with other settings (target, layer ids, lengths, shard size,
top-k, sampling) is refused.
"""

import gzip
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from graftlib.core.errors import GraftError, require
from graftlib.core.records import read_json_index, write_json_atomic

INDEX = "index.json"
FORMAT = 2
# Settings that every shard of one data directory must share.
SHARED_KEYS = ("target", "pool", "target_layer_ids", "hidden_size", "max_prompt_tokens",
               "max_response_tokens", "shard_size", "top_k", "sample_share", "sample_temperature", "branches",
               "branch_tokens")


@dataclass
class Sequence:
    tokens: torch.Tensor  # int64 [n]: prompt + response
    prompt_len: int
    features: torch.Tensor  # [n - 1, n_layers * hidden]
    uid: str = ""
    topk_ids: torch.Tensor | None = None  # int [n - prompt_len, k]: target's top-k over each response token
    topk_logp: torch.Tensor | None = None  # float [n - prompt_len, k]: their log-probs (T = 1)

    @property
    def response_len(self) -> int:
        return len(self.tokens) - self.prompt_len

    def greedy(self) -> bool:
        """Whether the response is the target's greedy one: every token its stored top-1 or tied with it
        (True when no top-k was stored). A tie is a token whose stored log-prob equals the first choice's:
        a bf16 target's logits tie often (about 1% of positions), and argmax and top-k may break a tie
        differently, so without it ~3 in 4 bf16 responses of 250+ tokens would not count. Read from the
        data itself, so it holds whatever hash chose the sampled share when the data was made (data made
        before that hash was salted samples other prompts)."""
        if self.topk_ids is None:
            return True
        tok = self.tokens[self.prompt_len:]
        ids = self.topk_ids.long()
        tied = (ids == tok[:, None]) & (self.topk_logp == self.topk_logp[:, :1])
        return bool(((ids[:, 0] == tok) | tied.any(-1)).all())


@dataclass
class DataIndex:
    target: str
    pool: str
    target_layer_ids: list[int]
    hidden_size: int
    max_prompt_tokens: int
    max_response_tokens: int
    shard_size: int
    top_k: int = 0
    sample_share: float = 0.0
    sample_temperature: float = 0.8
    branches: int = 0
    branch_tokens: int = 32
    format: int = FORMAT
    shards: list[dict] = field(default_factory=list)

    def shared(self) -> dict:
        return {k: getattr(self, k) for k in SHARED_KEYS}

    def totals(self) -> dict:
        keys = ("n_seqs", "prompt_tokens", "response_tokens", "seconds")
        tot = {k: sum(s[k] for s in self.shards) for k in keys}
        tot["bytes"] = sum(s.get("bytes", 0) for s in self.shards)
        return tot


def features_path(shard: Path) -> Path:
    return shard.with_name(shard.name.removesuffix(".safetensors") + ".features.npy")


def token_tensors(seqs: list[Sequence]) -> dict[str, torch.Tensor]:
    """A shard's tokens, lengths and prompt lengths (what a shard and a corpus shard both store)."""
    return {"tokens": torch.cat([s.tokens for s in seqs]).to(torch.int32),
            "lengths": torch.tensor([len(s.tokens) for s in seqs], dtype=torch.int64),
            "prompt_lens": torch.tensor([s.prompt_len for s in seqs], dtype=torch.int64)}


def write_shard(path: Path, seqs: list[Sequence]) -> int:
    """Write one shard (features first, then the tensors file that marks it present); returns bytes."""
    tensors = token_tensors(seqs)
    if seqs[0].topk_ids is not None:
        tensors["topk_ids"] = torch.cat([s.topk_ids for s in seqs]).to(torch.int32).contiguous()
        tensors["topk_logp"] = torch.cat([s.topk_logp for s in seqs]).to(torch.float16).contiguous()
    feats = torch.cat([s.features for s in seqs]).to(torch.float16).numpy()
    fpath = features_path(path)
    ftmp = fpath.with_name(fpath.name + ".partial")
    with open(ftmp, "wb") as f:
        np.save(f, feats)
    ftmp.replace(fpath)
    tmp = path.with_name(path.name + ".partial")
    save_file(tensors, tmp, metadata={"format": "pt"})
    tmp.replace(path)
    return path.stat().st_size + fpath.stat().st_size


def read_shard(path: Path, uids: list[str] | None = None, mmap: bool = True) -> list[Sequence]:
    """The sequences of one shard; features are a memory map of the .npy file unless `mmap=False`."""
    t = load_file(path)
    fpath = features_path(path)
    require(fpath.is_file(), f"drafter data shard {path} has no features file {fpath.name}")
    # copy-on-write map: torch gets a writable view, and nothing is read until a row is used
    feats = torch.from_numpy(np.load(fpath, mmap_mode="c" if mmap else None))
    lengths, prompt_lens = t["lengths"].tolist(), t["prompt_lens"].tolist()
    tokens = t["tokens"].long()
    top_ids, top_logp = t.get("topk_ids"), t.get("topk_logp")
    seqs, off, foff, roff = [], 0, 0, 0
    for i, (n, p) in enumerate(zip(lengths, prompt_lens)):
        uid = uids[i] if uids else f"{path.stem}/{i}"
        r = n - p
        seqs.append(Sequence(tokens[off:off + n], p, feats[foff:foff + n - 1], uid,
                             top_ids[roff:roff + r] if top_ids is not None else None,
                             top_logp[roff:roff + r] if top_logp is not None else None))
        off, foff, roff = off + n, foff + n - 1, roff + r
    require(off == len(tokens) and foff == len(feats), f"drafter data shard {path} is inconsistent")
    require(top_ids is None or roff == len(top_ids), f"drafter data shard {path}: top-k rows inconsistent")
    return seqs


def read_index(out: Path) -> DataIndex | None:
    path = Path(out) / INDEX
    raw = read_json_index(path, FORMAT, "drafter data (regenerate older data with `graft drafter-data`)")
    if raw is None:
        return None
    try:
        return DataIndex(**raw)
    except TypeError as e:
        raise GraftError(f"drafter data index {path} is malformed: {e}") from None


def write_index(out: Path, index: DataIndex) -> None:
    write_json_atomic(Path(out) / INDEX, asdict(index))


def load_dataset(out: str | Path, layer_ids: list[int] | None = None) -> tuple[DataIndex, list[Sequence]]:
    """All finished shards of a data directory (features memory-mapped); `layer_ids` keeps a subset
    of the stored layers (that copies the kept columns into memory)."""
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


def write_prompts(path: str | Path, items: list) -> None:
    """A prompts file (JSONL, gzip if the name ends in .gz) of `data.Item`s, e.g. to carry a pool to
    a machine without the prompt-set packages; `read_prompts` gives the same items back."""
    path = Path(path)
    lines = "".join(json.dumps({"task": i.task, "uid": i.uid, "text": i.text, "source": i.source}) + "\n"
                    for i in items)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_bytes(gzip.compress(lines.encode(), mtime=0) if path.suffix == ".gz" else lines.encode())
    tmp.replace(path)


def read_prompts(path: str | Path) -> list:
    from graftlib.data.prompts import Item

    path = Path(path)
    require(path.is_file(), f"prompts file {path} not found")
    raw = path.read_bytes()
    text = gzip.decompress(raw).decode() if path.suffix == ".gz" else raw.decode()
    try:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        items = [Item(r["task"], r["uid"], r["text"], r["source"]) for r in rows]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise GraftError(f"prompts file {path} is malformed (want JSONL of task, uid, text, source): {e}") from None
    require(items, f"prompts file {path} holds no prompts")
    return items
