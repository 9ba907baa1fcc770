"""Walked decoding (`graftlib.core.ar_path`): the rounds of a decode whose verify is a walk along greedy AR's
tokens equal those of the verified decode, round by round, on tiny models (both architectures, fixed and
adaptive methods, SABA's gates) and on the embedded pair (long accepted paths, the shipped TDES and SABA)."""

import pytest
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.errors import GraftError
from graftlib.core.sampling import Sampling
from graftlib.lab.run.bench import record_mismatch
from graftlib.methods.decoder import Decoder, WalkedDecoder
from graftlib.methods.registry import MethodInputs
from graftlib.methods.saba_params import SabaParams

GATED = SabaParams(c_ar=[0.02, 0.0], max_skip=2, post_gate=False)
POST_GATED = SabaParams(c_ar=[0.02, 0.0], max_skip=2, c_draft=0.005)


def rounds(res) -> list[tuple]:
    return [(r.accepted, r.budget, r.nodes, r.prefix_len, r.last_depth, r.mismatch, r.censored) for r in res.rounds]


def same_rounds(target, drafter, method, budget, prompt, max_new, eos_ids=None, **kw):
    real_dec = Decoder.for_method(target, drafter, method, budget, eos_ids=eos_ids, **kw)
    walked_dec = WalkedDecoder.for_method(target, drafter, method, budget, eos_ids=eos_ids, **kw)
    for dec in (real_dec, walked_dec):
        dec.observers.append(record_mismatch)  # the mismatch flag compared too
    real = real_dec.decode(prompt, max_new)
    ar = Decoder.for_method(target, None, "ar", eos_ids=eos_ids).decode(prompt, max_new).tokens
    walked = walked_dec.decode_along(prompt, ar, max_new)
    assert walked.tokens == real.tokens == ar
    assert rounds(walked) == rounds(real)
    assert all(r.t_verify == 0 for r in walked.rounds)
    return walked


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("method,budget,saba", [("dflash", 5, None), ("ddtree", 8, None), ("ddtree", 32, None),
                                                ("caddtree", 16, SabaParams()), ("ddtree+saba", 16, SabaParams()),
                                                ("ddtree+saba", 16, GATED), ("ddtree+saba", 16, POST_GATED)],
                         ids=["chain5", "ddtree8", "ddtree32", "caddtree", "saba", "saba-gated", "saba-post-gated"])
def test_walked_rounds_equal_the_verified_ones_on_tiny_models(arch, method, budget, saba):
    seed = {"llama": 0, "qwen3": 1}[arch]
    target, drafter = tiny_target(arch, seed=seed, initializer_range=0.1), tiny_drafter(seed=seed)
    walked = same_rounds(target, drafter, method, budget, random_prompt(7, 11), 37, inputs=MethodInputs(saba=saba))
    if saba is GATED:
        assert any(r.budget == 0 for r in walked.rounds)


@pytest.mark.usefixtures("one_thread")
def test_walked_continuation_and_refusals():
    target, drafter = tiny_target("llama", seed=0, initializer_range=0.1), tiny_drafter(seed=0)
    prompt = random_prompt(3, 9)
    ar = Decoder.for_method(target, None, "ar").decode(prompt, 30).tokens
    dec = WalkedDecoder.for_method(target, drafter, "ddtree", 8)
    assert dec.continuation(prompt, [], 30).tokens == ar  # computed from nothing: greedy AR's tokens
    cont = dec.continuation(prompt, ar[:10], 30)
    assert cont.tokens == ar and cont.features.shape[1] == len(prompt) + 30
    with pytest.raises(GraftError, match="DFlash-drafted"):
        WalkedDecoder.for_method(target, drafter, "eagle3", 8)
    with pytest.raises(GraftError, match="T = 0"):
        WalkedDecoder.for_method(target, drafter, "ddtree", 8, sampling=Sampling(0.8)).decode_along(prompt, ar, 30)


COUNTING = "List the numbers from 1 to 30, separated by commas."
CLIPS = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
         "clips did Natalia sell altogether in April and May?")


@pytest.mark.slow(seconds=40)
@pytest.mark.parametrize("method,budget,texts", [("ddtree", 64, (COUNTING, CLIPS)), ("graft", 64, (CLIPS,)),
                                                 ("ddtree+saba", 64, (COUNTING,))], ids=["ddtree", "graft", "saba"])
def test_walked_rounds_equal_the_verified_ones_on_the_embedded_pair(embedded_pair, method, budget, texts):
    p = embedded_pair
    longest = max(max(r.accepted for r in same_rounds(p.target, p.drafter, method, budget, p.prompt_ids(text), 48,
                                                      p.eos_ids).rounds) for text in texts)
    if method == "ddtree":  # long accepted paths: the walk is checked deep into the tree
        assert longest >= 6


@pytest.mark.usefixtures("one_thread")
def test_a_shared_continuation_walks_the_same_rounds_and_another_prompts_is_refused():
    target, drafter = tiny_target("llama", seed=0, initializer_range=0.1), tiny_drafter(seed=0)
    prompt, n = random_prompt(4, 9), 24
    ar = Decoder.for_method(target, None, "ar").decode(prompt, n).tokens
    first = WalkedDecoder.for_method(target, drafter, "ddtree", 8)
    alone = first.decode_along(prompt, ar, n)
    shared = WalkedDecoder.for_method(target, drafter, "dflash", 5).decode_along(prompt, ar, n,
                                                                               continuation=first.last_continuation)
    assert rounds(alone) == rounds(first.decode_along(prompt, ar, n, continuation=first.last_continuation))
    assert rounds(shared) == rounds(WalkedDecoder.for_method(target, drafter, "dflash", 5).decode_along(prompt, ar, n))
    other = random_prompt(5, 9)
    with pytest.raises(GraftError, match="another prompt"):
        WalkedDecoder.for_method(target, drafter, "ddtree", 8).decode_along(other, ar, n,
                                                                            continuation=first.last_continuation)
