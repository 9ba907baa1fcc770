"""torchrun sharding: rank parsing, prompt shards, per-rank files, and merging on reading."""

import pytest

from graftlib.core.errors import GraftError
from graftlib.core.records import append_record
from graftlib.lab.shard import merged_records, rank_world, shard, shard_path


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
