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
