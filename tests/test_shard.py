"""torchrun sharding: rank parsing, prompt shards, per-rank files, merging on reading, and the
docs/usage.md's torchrun command end to end (2 CPU ranks, tiny models, the fixture prompt sets)."""

import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tiny import write_drafter_dir, write_target_dir

from graftlib.core.errors import GraftError
from graftlib.core.records import append_record, read_records
from graftlib.lab.run.shard import merged_records, rank_world, shard, shard_path, wait_for_records

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_FILES = Path(__file__).parent / "fixtures" / "data" / "files"


def test_rank_world_from_environment(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert rank_world() == (0, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert rank_world() == (2, 3)
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(GraftError, match="not in \\[0, WORLD_SIZE=3\\)"):
        rank_world()


def test_shards_partition_the_prompts():
    items = list(range(10))
    parts = [shard(items, r, 3) for r in range(3)]
    assert sorted(x for p in parts for x in p) == items and parts[0] == [0, 3, 6, 9]
    assert shard(items, 0, 1) == items


def test_rank_files_merge_on_reading(tmp_path):
    out = tmp_path / "bench.jsonl"
    assert shard_path(out, 0, 1) == out
    paths = [shard_path(out, r, 2) for r in range(2)]
    assert [p.name for p in paths] == ["bench.rank0-of-2.jsonl", "bench.rank1-of-2.jsonl"]
    append_record(out, {"uid": "a"})
    for i, p in enumerate(paths):
        append_record(p, {"uid": f"r{i}"})
    append_record(tmp_path / "other.rank0-of-2.jsonl", {"uid": "x"})  # another sweep's shard: not merged
    assert sorted(r["uid"] for r in merged_records(out)) == ["a", "r0", "r1"]


def test_rank_zero_waits_until_every_rank_is_in(tmp_path):
    out = tmp_path / "bench.jsonl"
    append_record(shard_path(out, 0, 2), {"uid": "p0", "key": "ar", "setting_id": "s"})
    append_record(shard_path(out, 0, 2), {"uid": "p1", "key": "ar", "setting_id": "other"})  # another sweep
    said = []
    late = threading.Timer(0.3, append_record, (shard_path(out, 1, 2), {"uid": "p1", "key": "ar", "setting_id": "s"}))
    late.start()
    recs = wait_for_records(out, "s", {("p0", "ar"), ("p1", "ar")}, poll_s=0.05, say=said.append)
    late.join()
    assert [(r["uid"], r["setting_id"]) for r in recs] == [("p0", "s"), ("p1", "s")]
    assert said == ["waiting for the other ranks: 1 of 2 decodes in"]
    with pytest.raises(GraftError, match="nothing to wait for"):
        wait_for_records(out, "s", set())


def readme_torchrun_command() -> list[str]:
    """The torchrun line of docs/usage.md, split as a shell would."""
    lines = [ln for ln in (ROOT / "docs" / "usage.md").read_text().splitlines() if ln.startswith("torchrun ")]
    assert len(lines) == 1, "docs/usage.md shows one torchrun command"
    return shlex.split(lines[0])


@pytest.mark.slow
def test_readme_torchrun_command_prints_one_merged_table(tmp_path):
    """The command as docs/usage.md writes it (torchrun's parser included), with a tiny pair, 2 new tokens
    and the output in a temp folder appended: each rank writes its own file, only rank 0 prints a
    table, and that table covers both ranks' prompts."""
    argv = readme_torchrun_command()
    assert argv[:4] == ["torchrun", "--standalone", "--nproc-per-node", "2"]
    target, drafter = write_target_dir(tmp_path / "target", "qwen3"), write_drafter_dir(tmp_path / "drafter")
    out = tmp_path / "x.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", *argv[1:], "--target", str(target), "--drafter",
           str(drafter), "--device", "cpu", "--max-new-tokens", "2", "--no-warmup", "--shipped-costs",
           "--out", str(out)]
    env = dict(os.environ, GRAFT_HOME=str(tmp_path / "home"), GRAFT_DATA_FILES=str(FIXTURE_FILES),
               OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        assert len(read_records(shard_path(out, rank, 2))) == 2  # one prompt x (ar, ddtree@4)
    assert not out.exists()
    tables = [ln for ln in proc.stdout.splitlines() if re.match(r"(\[default\d\]:)?run +n +MAT", ln)]
    assert len(tables) == 1, proc.stdout
    rows = [ln for ln in proc.stdout.splitlines() if re.match(r"(\[default\d\]:)?(ar|ddtree@4) +2 ", ln)]
    assert len(rows) == 2, proc.stdout  # both runs over both ranks' prompts (n = 2)
    assert "rank 1 of 2 done; rank 0 prints the merged table" in proc.stdout


def test_bench_prompt_count_is_n_prompts_and_n_outside_torchrun():
    from graftlib.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["bench", "--n-prompts", "3"]).n_prompts == 3 and parse(["bench", "--n", "5"]).n_prompts == 5
