"""Benchmark plumbing: resumable records, run parsing, aggregation, interleaved resumable runs."""

import json
from types import SimpleNamespace

import pytest
import torch
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.errors import GraftError
from graftlib.core.records import append_record, read_records, setting_id
from graftlib.core.timing import WarmUp, warm_up
from graftlib.lab.report.metrics import decoded_tokens, exactness_cell, format_table, summarize
from graftlib.lab.run.bench import BenchPrompt, BenchSpec, Run, parse_runs, run_bench, warm_key
from graftlib.models import Pair


def test_records_survive_a_torn_line(tmp_path):
    f = tmp_path / "r.jsonl"
    append_record(f, {"a": 1})
    with f.open("a") as fh:
        fh.write('{"a": 2, "b"')  # an interrupted write
    append_record(f, {"a": 3})
    assert [r["a"] for r in read_records(f)] == [1, 3]
    assert read_records(tmp_path / "missing.jsonl") == []


def test_setting_id_depends_on_every_field():
    a = setting_id(target="t", max_new_tokens=64)
    assert a == setting_id(max_new_tokens=64, target="t")
    assert a != setting_id(target="t", max_new_tokens=65)


def test_parse_runs():
    runs = parse_runs(["dflash", "ddtree"], [4, 8], [3])
    assert [r.key for r in runs] == ["ar", "dflash@3", "ddtree@4", "ddtree@8"]
    runs = parse_runs(["ddtree", "ddtree+tdes", "graft", "caddtree"], [8, 16], [3], caps=[64])
    assert [r.key for r in runs] == ["ar", "ddtree@8", "ddtree@16", "ddtree+tdes@8", "ddtree+tdes@16", "graft@64",
                                     "caddtree@64"]
    assert [r.key for r in parse_runs(["graft"], [8], [3])] == ["ar", "graft@8"]  # no caps: the budgets
    with pytest.raises(GraftError, match="unknown method 'beam'"):
        parse_runs(["beam"], [4], [3])
    with pytest.raises(GraftError, match="budget must be >= 1"):
        parse_runs(["ddtree"], [0], [3])
    runs = parse_runs(["ddtree", "ddtree+tdes@8", "graft"], [4, 16], [3], caps=[64])
    assert [r.key for r in runs] == ["ar", "ddtree@4", "ddtree@16", "ddtree+tdes@8", "graft@64"]
    for bad in ("ddtree@x", "ar@4", "ddtree@"):
        with pytest.raises(GraftError, match="expected method@budget"):
            parse_runs([bad], [4], [3])
    with pytest.raises(GraftError, match="budget must be >= 1"):
        parse_runs(["ddtree@0"], [4], [3])


def _rec(uid, key, method, new, decode_s, rounds, acc, nodes=0):
    return {"uid": uid, "key": key, "method": method, "budget": None, "new_tokens": new, "decode_s": decode_s,
            "rounds": rounds, "accepted_sum": acc, "nodes_sum": nodes, "matches_ar": True,
            "stage_s": {"draft": 0.1, "tree": 0.0, "verify": 0.2, "commit": 0.0}}


def test_summarize_pools_and_pairs_with_ar():
    recs = [_rec("p1", "ar", "ar", 11, 1.0, 10, 10), _rec("p2", "ar", "ar", 21, 3.0, 20, 20),
            _rec("p1", "ddtree@8", "ddtree", 11, 0.5, 4, 10, 32), _rec("p2", "ddtree@8", "ddtree", 21, 1.0, 8, 20, 64)]
    rows = {r["key"]: r for r in summarize(recs)}
    tree = rows["ddtree@8"]
    assert tree["mat"] == pytest.approx(30 / 12)
    assert tree["tokens_per_s"] == pytest.approx(30 / 1.5)
    assert tree["speedup"] == pytest.approx((4.0 / 30) / (1.5 / 30))
    assert tree["mean_nodes"] == pytest.approx(96 / 12)
    assert rows["ar"]["speedup"] == pytest.approx(1.0)
    assert tree["speedup_ci"] is None  # fewer than 3 prompts


def test_speedup_ci_brackets_the_pooled_ratio():
    """The bootstrap interval over prompts contains the pooled speedup, collapses when every prompt
    has the same ratio, and widens with the spread across prompts."""
    ar = [_rec(f"p{i}", "ar", "ar", 11, 1.0, 10, 10) for i in range(6)]
    same = [_rec(f"p{i}", "g", "graft", 11, 0.8, 8, 10) for i in range(6)]
    spread = [_rec(f"p{i}", "g", "graft", 11, t, 8, 10) for i, t in enumerate([0.6, 0.7, 0.8, 0.9, 1.0, 1.1])]
    lo, hi = summarize(ar + same)[1]["speedup_ci"]
    assert lo == pytest.approx(1.25) and hi == pytest.approx(1.25)
    row = summarize(ar + spread)[1]
    lo, hi = row["speedup_ci"]
    assert lo < row["speedup"] < hi and hi - lo > 0.1 and lo > 0.9 and hi < 1.5


@pytest.fixture(scope="module")
def tiny_pair(one_thread):
    target, drafter = tiny_target("qwen3"), tiny_drafter()
    return Pair(target, SimpleNamespace(eos_token_id=None), drafter, False, "tiny-qwen3", "tiny")


def test_run_bench_checks_exactness_and_resumes(tiny_pair, tmp_path):
    out = tmp_path / "bench.jsonl"
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 9))) for i in range(2)]
    runs = [Run("ar", None), Run("dflash", 3), Run("ddtree", 16)]
    recs = run_bench(tiny_pair, prompts, runs, out, BenchSpec(24), progress=False)
    assert len(recs) == 6 and len(read_records(out)) == 6
    assert all(r["matches_ar"] for r in recs if r["method"] != "ar")
    assert all(r["new_tokens"] == 24 for r in recs)
    for r in (r for r in recs if r["method"] == "ar"):  # AR brackets each prompt's block: timed before and after
        assert len(r["decode_s_runs"]) == 2 and r["decode_s"] == pytest.approx(sum(r["decode_s_runs"]) / 2)
    assert [r["key"] for r in read_records(out)] == ["dflash@3", "ddtree@16", "ar"] * 2  # AR's record ends the block
    # a re-run with the same settings decodes nothing new
    again = run_bench(tiny_pair, prompts, runs, out, BenchSpec(24), progress=False)
    assert len(read_records(out)) == 6 and len(again) == 6
    # interrupted sweep: drop the last two records; the re-run redoes exactly those
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:4]) + "\n" + lines[4][:20])
    run_bench(tiny_pair, prompts, runs, out, BenchSpec(24), progress=False)
    done = read_records(out)
    assert len(done) == 6 and sorted((r["uid"], r["key"]) for r in done) == sorted(
        (p.uid, r.key) for p in prompts for r in runs)
    # another setting (max_new_tokens) is measured separately
    run_bench(tiny_pair, prompts[:1], runs[:1], out, BenchSpec(12), progress=False)
    assert len(read_records(out)) == 7
    assert json.loads(out.read_text().splitlines()[-1])["new_tokens"] == 12


def test_run_bench_under_torchrun_writes_rank_files_that_merge(tiny_pair, tmp_path, monkeypatch):
    from graftlib.lab.run.shard import merged_records

    out = tmp_path / "bench.jsonl"
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 7))) for i in range(3)]
    runs = [Run("ar", None), Run("ddtree", 8)]
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        run_bench(tiny_pair, prompts, runs, out, BenchSpec(12, warmup=False), progress=False)
    assert not out.exists()
    r0 = read_records(tmp_path / "bench.rank0-of-2.jsonl")
    r1 = read_records(tmp_path / "bench.rank1-of-2.jsonl")
    assert {r["uid"] for r in r0} == {"p0", "p2"} and {r["uid"] for r in r1} == {"p1"}
    assert len(merged_records(out)) == 6
    monkeypatch.setenv("WORLD_SIZE", "1")  # a single-process reader (a notebook) finds every shard done
    monkeypatch.setenv("RANK", "0")
    recs = run_bench(tiny_pair, prompts, runs, out, BenchSpec(12, warmup=False), progress=False)
    assert len(recs) == 6 and not out.exists() and all(r["matches_ar"] for r in recs if r["method"] != "ar")


def test_setting_names_the_drafter_weights():
    """Results of a retrained drafter never share a setting with an older one's."""
    target, drafter = tiny_target("qwen3", seed=1), tiny_drafter(seed=2)
    a = Pair(target, SimpleNamespace(eos_token_id=None), drafter, True, "t", "d").describe()
    with torch.no_grad():
        drafter.fc.weight[0, 0] += 1.0
    b = Pair(target, SimpleNamespace(eos_token_id=None), drafter, True, "t", "d").describe()
    assert len(a["drafter_id"]) == 12 and a["drafter_id"] != b["drafter_id"]
    assert {k: v for k, v in a.items() if k != "drafter_id"} == {k: v for k, v in b.items() if k != "drafter_id"}


def test_table_shows_mismatch_rate_or_a_dash():
    row = dict(key="ddtree@8", prompts=2, mat=2.0, tokens_per_s=20.0, speedup=1.1, mean_nodes=8.0, ar_share=0.25,
               declined_share=0.125, draft_ms=8.0, tree_ms=0.3, verify_ms=60.0, commit_ms=0.9, exact=True,
               mismatch_rate=0.1234)
    lines = format_table([row, dict(row, key="ar", mismatch_rate=float("nan"), exact=False)]).splitlines()
    assert lines[0].split()[:10] == ["run", "n", "MAT", "tok/s", "speedup", "CI95", "nodes", "AR%", "decl%", "mism%"]
    assert lines[2].split()[5] == "-" and lines[2].split()[7:10] == ["25", "12", "12.3"] and lines[2].endswith("yes")
    assert lines[3].split()[9] == "-" and lines[3].endswith("NO")
    with_ci = format_table([dict(row, speedup_ci=(0.912, 1.046))]).splitlines()[2].split()
    assert with_ci[5] == "0.91-1.05"


def test_walked_runs_have_the_verified_rounds_and_modeled_figures_only(tiny_pair, tmp_path):
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 9))) for i in range(2)]
    runs = [Run("ar", None), Run("dflash", 3), Run("ddtree", 16)]
    verified = run_bench(tiny_pair, prompts, runs, tmp_path / "v.jsonl", BenchSpec(24, warmup=False), progress=False)
    walked = run_bench(tiny_pair, prompts, runs, tmp_path / "w.jsonl", BenchSpec(24, warmup=False, walk=True),
                       progress=False)
    by = {(r["uid"], r["key"]): r for r in verified}
    for w in walked:
        v = by[(w["uid"], w["key"])]
        assert w["round_shapes"] == v["round_shapes"] and w["tokens"] == v["tokens"]
        if w["method"] == "ar":
            assert "walked" not in w and w["decode_s"] > 0
        else:
            assert w["walked"] and w["decode_s"] != w["decode_s"] and w["matches_ar"] is None  # NaN: no wall clock
            assert w["modeled_s"] == pytest.approx(v["modeled_s"])
    assert walked[0]["setting"]["walk"] is True and "walk" not in verified[0]["setting"]
    cells = {row["key"]: exactness_cell(row) for row in summarize(walked)}
    assert cells == {"ar": "yes", "dflash@3": "walked", "ddtree@16": "walked"}
    with pytest.raises(GraftError, match="T = 0"):
        from graftlib.core.sampling import Sampling
        run_bench(tiny_pair, prompts, runs, tmp_path / "t.jsonl", BenchSpec(24, walk=True, sampling=Sampling(0.7)),
                  progress=False)


def test_warm_up_runs_until_two_decodes_in_a_row_agree():
    times = iter([11.1, 2.6, 2.62, 9.9])  # the H200's AR: cold, then steady
    assert warm_up(lambda: next(times)) == {"decodes": 3, "stable": True}
    assert warm_up(lambda: 1.0) == {"decodes": 2, "stable": True}
    halving = iter([10.0 / 2 ** k for k in range(20)])  # never settles: timed anyway, and said so
    assert warm_up(lambda: next(halving), WarmUp(max_decodes=5)) == {"decodes": 5, "stable": False}
    assert warm_key(Run("ddtree", 12)) == warm_key(Run("ddtree", 16)) != warm_key(Run("ddtree", 17))
    assert warm_key(Run("ar", None)) != warm_key(Run("ddtree", 1))


def test_no_cold_decode_is_timed(tiny_pair, tmp_path, monkeypatch):
    """A fake clock: each method's first three decodes of a tree-size bucket run cold (50x, then 10x, then 2x
    a warm decode's seconds per token, as a GPU compiles and fills caches); the bench times none of them, and
    each record says how many warm-up decodes its run took."""
    from collections import Counter

    from graftlib.lab.run import bench

    real, calls = bench.decode_prompt, Counter()

    def clocked(pair, run, prompt, max_new_tokens, *args, **kwargs):
        rec = real(pair, run, prompt, max_new_tokens, *args, **kwargs)
        calls[warm_key(run)] += 1
        slow = {1: 50.0, 2: 10.0, 3: 2.0}.get(calls[warm_key(run)], 1.0)
        rec["decode_s"] = 0.01 * slow * max(1, len(rec["tokens"]) - 1)
        return rec

    monkeypatch.setattr(bench, "decode_prompt", clocked)
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 7))) for i in range(2)]
    runs = [Run("ar", None), Run("ddtree", 8), Run("ddtree", 6), Run("dflash", 3)]
    recs = run_bench(tiny_pair, prompts, runs, tmp_path / "b.jsonl", BenchSpec(12), progress=False)
    assert all(r["decode_s"] == pytest.approx(0.01 * decoded_tokens(r)) for r in recs)  # every timed decode warm
    assert {r["key"]: r["warmup"]["decodes"] for r in recs} == {"ar": 5, "ddtree@8": 5, "ddtree@6": 5, "dflash@3": 5}
    assert calls[warm_key(Run("ddtree", 6))] == 5 + 2 * 2  # one bucket: warmed once for both budgets


def test_a_walked_bench_takes_ar_from_another_setting_and_a_timed_one_never_does(tiny_pair, tmp_path, monkeypatch):
    from collections import Counter

    from graftlib.lab.run import bench

    real, calls = bench.decode_prompt, Counter()

    def counted(pair, run, *args, **kwargs):
        calls[run.method] += 1
        return real(pair, run, *args, **kwargs)

    monkeypatch.setattr(bench, "decode_prompt", counted)
    out = tmp_path / "b.jsonl"
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 7))) for i in range(2)]
    runs = [Run("ar", None), Run("ddtree", 8)]
    walked = BenchSpec(12, warmup=False, walk=True)
    first = run_bench(tiny_pair, prompts, runs, out, walked, progress=False, extra={"x": 1})
    assert calls["ar"] == 4  # bracketed: twice a prompt
    second = run_bench(tiny_pair, prompts, runs, out, walked, progress=False, extra={"x": 2})
    assert calls["ar"] == 4 and calls["ddtree"] == 4  # AR taken from the first setting, the walked runs decoded
    ar1, ar2 = ({r["uid"]: r for r in recs if r["key"] == "ar"} for recs in (first, second))
    assert all(ar2[u]["tokens"] == ar1[u]["tokens"] and ar2[u]["ar_from"] == ar1[u]["setting_id"] for u in ar1)
    assert {r["setting_id"] for r in second} != {r["setting_id"] for r in first}
    run_bench(tiny_pair, prompts, runs, out, BenchSpec(12, warmup=False), progress=False,
              extra={"x": 3})  # verified: timed
    assert calls["ar"] == 8


def test_same_decodes_compares_the_deterministic_columns_only(tmp_path, capsys):
    from graftlib.core.records import append_record
    from graftlib.lab.report.metrics import same_decodes

    rec = dict(key="ddtree@8", uid="gsm8k/1", accepted=[3, 2], rounds=2, nodes_sum=16, mismatch_sum=1, new_tokens=5,
               verdict="exact", decode_s=0.5)
    for name, changes in (("a", {}), ("b", {"decode_s": 0.7}), ("c", {"accepted": [2, 3]})):
        append_record(tmp_path / f"{name}.jsonl", dict(rec, **changes))
    assert same_decodes(tmp_path / "a.jsonl", tmp_path / "b.jsonl") == 0  # a clock is no difference
    assert "identical: 1 decodes" in capsys.readouterr().out
    assert same_decodes(tmp_path / "a.jsonl", tmp_path / "c.jsonl") == 1
    assert "accepted [3, 2] -> [2, 3]" in capsys.readouterr().out
