"""Sampling at T > 0: the processed distribution equals HF's logits processors (temperature, top-k,
top-p), a seed reproduces the draws, and T = 0 is the greedy path."""

import pytest
import torch
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from graftlib.core.errors import GraftError
from graftlib.core.sampling import GREEDY, LazySample, Sampling


@pytest.mark.parametrize("t, top_k, top_p", [(1.0, 0, 1.0), (0.6, 0, 1.0), (0.7, 5, 1.0), (1.0, 0, 0.8),
                                             (0.9, 8, 0.5), (2.0, 0, 0.95)])
def test_probs_equal_hf_logits_processors(t, top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 40, generator=g) * 3
    x = TemperatureLogitsWarper(t)(None, logits.clone())
    if top_k:
        x = TopKLogitsWarper(top_k)(None, x)
    if top_p < 1:
        x = TopPLogitsWarper(top_p)(None, x)
    want = torch.softmax(x, -1)
    got = Sampling(t, top_p, top_k).probs(logits)
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.allclose(got.sum(-1), torch.ones(6))


def test_lazy_sample_is_seeded_and_cached():
    g = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(5, 8, generator=g), torch.randn(30, 8, generator=g)
    s = Sampling(1.0, seed=7)
    a = LazySample(hidden, weight, s, s.generator(torch.device("cpu")))
    b = LazySample(hidden, weight, s, s.generator(torch.device("cpu")))
    assert [a[i] for i in (0, 2, 1)] == [b[i] for i in (0, 2, 1)]
    assert a[2] == a[2] and a.all_rows()[:3] == [a[0], a[1], a[2]]
    draws = [LazySample(hidden, weight, Sampling(1.0, seed=k), Sampling(1.0, seed=k).generator(
        torch.device("cpu")))[0] for k in range(200)]
    assert len(set(draws)) > 1
    assert GREEDY.greedy and GREEDY.generator(torch.device("cpu")) is None
    assert torch.equal(GREEDY.temper(hidden), hidden)


def test_bad_settings_are_named():
    with pytest.raises(GraftError, match="top_p"):
        Sampling(1.0, top_p=0).check()
    with pytest.raises(GraftError, match="temperature"):
        Sampling(-1.0).check()


def test_bench_at_t_above_zero_is_seeded_per_prompt_and_keyed_by_its_sampling(tmp_path, one_thread):
    from types import SimpleNamespace

    from tiny import random_prompt, tiny_drafter, tiny_target

    from graftlib.core.records import read_records
    from graftlib.lab.run.bench import BenchPrompt, BenchSpec, Run, run_bench
    from graftlib.models.pair import Pair

    pair = Pair(tiny_target("qwen3"), SimpleNamespace(eos_token_id=None), tiny_drafter(), False, "tiny-qwen3", "tiny")
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 9))) for i in range(2)]
    runs = [Run("ar", None), Run("ddtree", 8)]
    hot = Sampling(0.8, seed=3)
    recs = run_bench(pair, prompts, runs, tmp_path / "a.jsonl", BenchSpec(16, sampling=hot), progress=False)
    again = run_bench(pair, prompts, runs, tmp_path / "b.jsonl", BenchSpec(16, sampling=hot), progress=False)
    key = {(r["uid"], r["key"]): r["tokens"] for r in again}
    assert all(key[(r["uid"], r["key"])] == r["tokens"] for r in recs)  # same seed, same tokens
    assert all(r["matches_ar"] is None for r in recs) and recs[0]["setting"]["sampling"]["temperature"] == 0.8
    ar = {r["uid"]: r["tokens"] for r in recs if r["method"] == "ar"}
    assert ar["p0"] != ar["p1"]  # prompts get their own streams (and AR decoded each twice alike: bracket)
    greedy = run_bench(pair, prompts, runs, tmp_path / "a.jsonl", BenchSpec(16), progress=False)
    assert all(r["matches_ar"] for r in greedy if r["method"] != "ar") and "sampling" not in greedy[0]["setting"]
    assert len(read_records(tmp_path / "a.jsonl")) == 8  # a T = 0 run is another setting, measured apart
    with pytest.raises(GraftError, match="hf baseline runs greedy only"):
        run_bench(pair, prompts[:1], [Run("hf", None)], tmp_path / "c.jsonl", BenchSpec(4, sampling=hot),
                  progress=False)


def test_temperature_lists_parse_or_name_the_problem():
    from graftlib.lab.workbook.runner import samplings

    assert [s.temperature for s in samplings("0, 0.6,1.0", top_p=0.9)] == [0.0, 0.6, 1.0]
    assert {s.top_p for s in samplings("0,1", top_p=0.9)} == {0.9}
    with pytest.raises(GraftError, match="'hot' is not a number"):
        samplings("0,hot")
    with pytest.raises(GraftError, match="must lie in"):
        samplings("-1")
    with pytest.raises(GraftError, match="empty"):
        samplings(" , ")
