"""The drafter-strength construction (`graftlib.models.strength`): its drafts move from the real drafter's
(s = 0) to the target's own (s = 1), and it changes no output: a verified decode with it equals greedy AR, and
a walked decode's rounds equal the verified one's."""

import pytest
import torch
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.errors import GraftError
from graftlib.methods.decoder import Decoder, WalkedDecoder
from graftlib.methods.saba_params import SabaParams
from graftlib.models.strength import StrengthDrafter


def rounds(res) -> list[tuple]:
    return [(r.accepted, r.budget, r.nodes, r.prefix_len, r.last_depth, r.mismatch) for r in res.rounds]


@pytest.fixture(scope="module")
def models(one_thread):
    return tiny_target("qwen3", seed=1, initializer_range=0.1), tiny_drafter(seed=1)


def _mat(res) -> float:
    return sum(r.accepted for r in res.rounds) / len(res.rounds)


@pytest.mark.parametrize("method,budget", [("dflash", 7), ("ddtree", 16), ("ddtree+saba", 32)])
@pytest.mark.parametrize("s", [0.3, 0.8])
def test_a_stronger_drafter_decodes_ar_exactly_and_walks_as_it_verifies(models, method, budget, s):
    target, base = models
    prompt, n = random_prompt(5, 10), 40
    ar = Decoder.for_method(target, None, "ar").decode(prompt, n).tokens
    walked_drafter, verified_drafter = StrengthDrafter(base, s), StrengthDrafter(base, s)
    saba = SabaParams() if method == "ddtree+saba" else None  # a calibration of no pair (the tiny one has none)
    walked = WalkedDecoder.for_method(target, walked_drafter, method, budget, saba=saba).decode_along(prompt, ar, n)
    dec = Decoder.for_method(target, verified_drafter, method, budget, saba=saba)
    verified_drafter.follow(WalkedDecoder.for_method(target, base, "ddtree", 4).continuation(
        prompt, ar, n + base.block_size), target.lm_head.weight)  # the verified decode handed the same continuation
    verified = dec.decode(prompt, n)
    assert verified.tokens == walked.tokens == ar
    assert rounds(walked) == rounds(verified)


def test_acceptance_grows_with_strength_and_a_full_strength_chain_accepts_the_block(models):
    target, base = models
    prompt, n = random_prompt(2, 12), 60
    ar = Decoder.for_method(target, None, "ar").decode(prompt, n).tokens
    mats = [_mat(WalkedDecoder.for_method(target, StrengthDrafter(base, s), "dflash", base.block_size - 1)
                 .decode_along(prompt, ar, n)) for s in (0.0, 0.5, 1.0)]
    assert mats[0] < mats[1] < mats[2]
    full = WalkedDecoder.for_method(target, StrengthDrafter(base, 1.0), "dflash", base.block_size - 1)
    assert all(r.accepted == base.block_size for r in full.decode_along(prompt, ar, n).rounds[:-1])
    # s = 0 is the real drafter, round for round
    real = WalkedDecoder.for_method(target, base, "ddtree", 16).decode_along(prompt, ar, n)
    zero = WalkedDecoder.for_method(target, StrengthDrafter(base, 0.0), "ddtree", 16).decode_along(prompt, ar, n)
    assert rounds(real) == rounds(zero)


def test_a_strength_drafter_needs_the_continuation(models):
    target, base = models
    with pytest.raises(GraftError, match="strength 0.5 drafts along a known greedy continuation"):
        Decoder.for_method(target, StrengthDrafter(base, 0.5), "ddtree", 8).decode(random_prompt(1, 8), 8)
    with pytest.raises(GraftError, match="must lie in"):
        StrengthDrafter(base, 1.5)
    assert StrengthDrafter(base, 0.5).block_size == base.block_size and torch.is_tensor(
        StrengthDrafter(base, 0.5).head_weight(target.lm_head.weight))


def _walked(target, n=2, new=40):
    from graftlib.lab.run.strength import Walked

    prompts = [random_prompt(10 + i, 10) for i in range(n)]
    ar = Decoder.for_method(target, None, "ar")
    return Walked("custom", prompts, [ar.decode(p, new).tokens for p in prompts], new)


def test_a_strength_is_fitted_to_a_chain_mat_and_the_continuation_rates_are_counted(models):
    from types import SimpleNamespace

    from graftlib.lab.run.strength import continuation_rates, fit_strength, mat, walked_rounds

    target, base = models
    pair = SimpleNamespace(target=target, drafter=base, eos_ids=[])
    w = _walked(target)
    chain = base.block_size - 1
    real, full = mat(walked_rounds(pair, 0.0, "dflash", chain, w)), mat(walked_rounds(pair, 1.0, "dflash", chain, w))
    goal = (real + full) / 2
    fit = fit_strength(pair, w, goal, tol=0.02)
    assert 0 < fit["s"] < 1 and abs(fit["mat"] - goal) <= 0.02 * goal
    assert mat(walked_rounds(pair, fit["s"], "dflash", chain, w)) == fit["mat"]  # walked decodes are deterministic
    assert fit_strength(pair, w, real / 2)["s"] == 0.0 and fit_strength(pair, w, 99.0)["bound"].startswith("even")
    rates = {s: continuation_rates(pair, s, w, budget=16) for s in (0.0, 1.0)}
    assert rates[1.0]["sibling"][1] == 0 and rates[1.0]["spine"][0] == 1.0  # at s = 1 the spine is the greedy path
    assert rates[0.0]["spine"][1] > 0 and 0.0 <= rates[0.0]["spine"][0] <= 1.0


def test_the_temperature_makes_the_drafter_as_confident_as_it_is_right_and_moves_no_top_1(models):
    from types import SimpleNamespace

    from graftlib.lab.run.strength import confidence, fit_temperature, mat, walked_rounds

    target, base = models
    pair = SimpleNamespace(target=target, drafter=base, eos_ids=[])
    w, chain = _walked(target), base.block_size - 1
    fit = fit_temperature(pair, 0.4, w)
    assert fit["confidence"] == pytest.approx(fit["accuracy"], abs=1e-3) and fit["tau"] != pytest.approx(1.0)
    assert mat(walked_rounds(pair, 0.4, "dflash", chain, w, tau=fit["tau"])) == mat(walked_rounds(pair, 0.4, "dflash",
                                                                                                   chain, w))
    trace = []
    walked_rounds(pair, 0.4, "dflash", chain, w, trace=trace)
    sharper, flatter = confidence(trace, 0.5)[0], confidence(trace, 2.0)[0]
    assert sharper > confidence(trace, 1.0)[0] > flatter
