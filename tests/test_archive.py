"""Committed records (`graftlib.lab.report.archive`): an evidence run's records pack small and unpack into a results
folder from which a bench redraws without decoding a single prompt."""

import gzip
from types import SimpleNamespace

import pytest
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.errors import GraftError
from graftlib.core.records import read_records
from graftlib.lab.report import archive
from graftlib.lab.report.metrics import summarize
from graftlib.lab.run import bench
from graftlib.lab.run.bench import BenchPrompt, BenchSpec, Run, run_bench
from graftlib.models import Pair


@pytest.fixture
def tiny_pair(one_thread):
    return Pair(tiny_target("qwen3"), SimpleNamespace(eos_token_id=None), tiny_drafter(), False, "tiny-qwen3", "tiny")


def test_packed_records_redraw_without_decoding(tiny_pair, tmp_path, monkeypatch):
    results, packed, restored = tmp_path / "results", tmp_path / "figures" / "records", tmp_path / "restored"
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 9))) for i in range(3)]
    runs = [Run("ar", None), Run("dflash", 3), Run("ddtree", 8)]
    first = run_bench(tiny_pair, prompts, runs, results / "bench.jsonl", BenchSpec(20, warmup=False), progress=False)
    stats = archive.pack(results, packed)
    assert stats["bench.jsonl"]["records"] == 9 and stats["bench.jsonl"]["settings"] == 1
    assert stats["bench.jsonl"]["bytes"] < (results / "bench.jsonl").stat().st_size / 3
    again = archive.pack(results, tmp_path / "again")  # the same records pack to the same bytes
    assert (packed / "bench.jsonl.gz").read_bytes() == (tmp_path / "again" / "bench.jsonl.gz").read_bytes()
    assert again["bench.jsonl"] == stats["bench.jsonl"]
    lines = gzip.decompress((packed / "bench.jsonl.gz").read_bytes()).decode().splitlines()
    assert sum('"setting":' in line for line in lines) == 1  # the setting once, not per record
    assert archive.unpack(packed, restored) == {"bench.jsonl.gz": 9}
    back = {(r["uid"], r["key"]): r for r in read_records(restored / "bench.jsonl")}
    assert all("tokens" in r for (_, key), r in back.items() if key == "ar")  # what a resumed bench walks along
    assert not any("tokens" in r for (_, key), r in back.items() if key != "ar")

    def no_decoding(*args, **kwargs):
        raise AssertionError("a packed record was decoded again")

    monkeypatch.setattr(bench, "decode_prompt", no_decoding)
    redrawn = run_bench(tiny_pair, prompts, runs, restored / "bench.jsonl", BenchSpec(20, warmup=False), progress=False)
    columns = ("prompts", "mat", "tokens_per_s", "speedup", "mean_nodes", "modeled_speedup", "mismatch_rate")

    def table(recs):  # nan (AR's mismatch rate) as None, so equal tables compare equal
        return {r["key"]: {k: None if r[k] != r[k] else r[k] for k in columns} for r in summarize(recs)}

    assert table(redrawn) == table(first)


def test_nothing_to_pack_or_unpack_is_one_line(tmp_path):
    with pytest.raises(GraftError, match="no JSONL records"):
        archive.pack(tmp_path, tmp_path / "out")
    with pytest.raises(GraftError, match="no packed records"):
        archive.unpack(tmp_path, tmp_path / "out")


def test_restore_resumes_from_the_committed_records_and_keeps_local_ones(tiny_pair, tmp_path, monkeypatch):
    """A fresh clone's evidence run restores what was committed (and decodes only the rest); a local results file,
    which holds at least what was packed from it, is never overwritten."""
    results, packed, fresh = tmp_path / "results", tmp_path / "records", tmp_path / "fresh"
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 9))) for i in range(3)]
    runs = [Run("ar", None), Run("ddtree", 8)]
    run_bench(tiny_pair, prompts[:2], runs, results / "bench.jsonl", BenchSpec(12, warmup=False), progress=False)
    archive.pack(results, packed)
    assert archive.restore(packed, fresh) == {"bench.jsonl.gz": 4}
    assert archive.restore(packed, fresh) == {}  # already there: kept
    decoded = []
    real = bench.decode_prompt
    monkeypatch.setattr(bench, "decode_prompt", lambda pair, run, prompt, *a, **k: decoded.append(prompt.uid)
                        or real(pair, run, prompt, *a, **k))
    recs = run_bench(tiny_pair, prompts, runs, fresh / "bench.jsonl", BenchSpec(12, warmup=False), progress=False)
    assert set(decoded) == {"p2"} and len(recs) == 6
    assert archive.restore(tmp_path / "none", fresh) == {}
