"""The drafter-strength construction (`graftlib.models.strength`): its drafts move from the real drafter's
(s = 0) to the target's own (s = 1), past a miss they follow the drafter's own spine as far as lam says, and it
changes no output: a verified decode with it equals greedy AR, and a walked decode's rounds equal the verified
one's."""

from dataclasses import replace

import pytest
import torch
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.errors import GraftError
from graftlib.core.kvcache import target_cache
from graftlib.core.verify import target_forward
from graftlib.lab.run.bench import record_mismatch
from graftlib.methods.decoder import Decoder, WalkedDecoder
from graftlib.methods.registry import MethodInputs
from graftlib.methods.saba_params import SabaParams
from graftlib.models.strength import OUT_OF_VOCAB, PAST_END, Strength, StrengthDrafter


def rounds(res) -> list[tuple]:
    return [(r.accepted, r.budget, r.nodes, r.prefix_len, r.last_depth, r.mismatch) for r in res.rounds]


@pytest.fixture(scope="module")
def models(one_thread):
    return tiny_target("qwen3", seed=1, initializer_range=0.1), tiny_drafter(seed=1)


def _mat(res) -> float:
    return sum(r.accepted for r in res.rounds) / len(res.rounds)


@pytest.mark.parametrize("method,budget", [("dflash", 7), ("ddtree", 16), ("ddtree+saba", 32)])
@pytest.mark.parametrize("strength", [Strength(0.3), Strength(0.8), Strength(0.5, 0.5, lam=0.0, kappa=0.5)])
def test_a_stronger_drafter_decodes_ar_exactly_and_walks_as_it_verifies(models, method, budget, strength):
    target, base = models
    prompt, n = random_prompt(5, 10), 40
    ar = Decoder.for_method(target, None, "ar").decode(prompt, n).tokens
    walked_drafter, verified_drafter = StrengthDrafter(base, strength), StrengthDrafter(base, strength)
    saba = SabaParams() if method == "ddtree+saba" else None  # a calibration of no pair (the tiny one has none)
    walking = WalkedDecoder.for_method(target, walked_drafter, method, budget, inputs=MethodInputs(saba=saba))
    dec = Decoder.for_method(target, verified_drafter, method, budget, inputs=MethodInputs(saba=saba))
    for d in (walking, dec):
        d.observers.append(record_mismatch)  # the mismatch flag compared too
    walked = walking.decode_along(prompt, ar, n)
    verified_drafter.follow(WalkedDecoder.for_method(target, base, "ddtree", 4).continuation(
        prompt, ar, n + base.block_size), target.lm_head.weight, target)  # the verified decode handed the same one
    verified = dec.decode(prompt, n)
    assert verified.tokens == walked.tokens == ar
    assert rounds(walked) == rounds(verified)


def test_acceptance_grows_with_strength_and_a_full_strength_chain_accepts_the_block(models):
    target, base = models
    prompt, n = random_prompt(2, 12), 60
    ar = Decoder.for_method(target, None, "ar").decode(prompt, n).tokens
    mats = [_mat(WalkedDecoder.for_method(target, StrengthDrafter(base, Strength(s)), "dflash", base.block_size - 1)
                 .decode_along(prompt, ar, n)) for s in (0.0, 0.5, 1.0)]
    assert mats[0] < mats[1] < mats[2]
    full = WalkedDecoder.for_method(target, StrengthDrafter(base, Strength(1.0, lam=0.0)), "dflash",
                                    base.block_size - 1)
    assert all(r.accepted == base.block_size for r in full.decode_along(prompt, ar, n).rounds[:-1])
    # s = 0 is the real drafter, round for round
    real = WalkedDecoder.for_method(target, base, "ddtree", 16).decode_along(prompt, ar, n)
    zero = WalkedDecoder.for_method(target, StrengthDrafter(base, Strength(0.0)), "ddtree", 16).decode_along(prompt, ar,
                                                                                                             n)
    assert rounds(real) == rounds(zero)


def test_lam_moves_the_tree_past_a_miss_but_never_a_chain(models):
    """lam acts past the spine's first miss only: a chain's rounds are the same at every lam (what the calibration's
    `chain_strength` relies on), a tree's are not, and the real drafter continues a sibling as its spine does."""
    target, base = models
    prompt, n = random_prompt(3, 12), 60
    ar = Decoder.for_method(target, None, "ar").decode(prompt, n).tokens

    def walk(method, budget, lam):
        drafter = StrengthDrafter(base, Strength(0.5, lam=lam, kappa=0.3))
        dec = WalkedDecoder.for_method(target, drafter, method, budget)
        dec.observers.append(record_mismatch)
        return rounds(dec.decode_along(prompt, ar, n))

    assert walk("dflash", base.block_size - 1, 0.0) == walk("dflash", base.block_size - 1, 1.0)
    assert walk("ddtree", 32, 0.0) != walk("ddtree", 32, 1.0)


def test_the_spine_query_is_the_target_after_that_prefix(models):
    """`_after` (a masked forward against the continuation's cache) gives the target's states a plain causal forward
    over the same prefix gives, and leaves the cache as it was."""
    target, base = models
    prompt, n = random_prompt(4, 9), 30
    ar = Decoder.for_method(target, None, "ar").decode(prompt, n).tokens
    cont = WalkedDecoder.for_method(target, base, "ddtree", 4).continuation(prompt, ar, n + base.block_size)
    drafter = StrengthDrafter(base, Strength(0.5, lam=0.0))
    drafter.follow(cont, target.lm_head.weight, target)
    pos, off = len(prompt) + 7, [5, 17, 3]
    before = cont.cache.get_seq_length()
    got = drafter._after(pos, off)
    assert cont.cache.get_seq_length() == before
    seq = (list(prompt) + cont.tokens)[:pos] + off
    with torch.inference_mode():
        plain = target_forward(target, torch.tensor([seq]), torch.arange(len(seq))[None],
                               target_cache(target.config, len(seq) + 1))
    torch.testing.assert_close(got, plain.hidden[-len(off):], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got, cont.hidden[pos:pos + len(off)], atol=1e-3)  # off the path: not the path's states


def test_kappa_makes_some_depths_all_or_nothing_the_same_for_every_method(models):
    target, base = models
    prompt, n = random_prompt(6, 9), 30
    ar = Decoder.for_method(target, None, "ar").decode(prompt, n).tokens
    cont = WalkedDecoder.for_method(target, base, "ddtree", 4).continuation(prompt, ar, n + base.block_size)
    weights = {}
    for kappa in (0.0, 0.6, 1.0):
        drafter = StrengthDrafter(base, Strength(0.4, kappa=kappa))
        drafter.follow(cont, target.lm_head.weight, target)
        drafter._start = len(prompt) + 2
        weights[kappa] = drafter._weights(15)
    assert torch.all(weights[0.0] == 0.4)
    assert set(weights[1.0].tolist()) <= {0.0, 1.0} and 0 < weights[1.0].sum() < 15
    mixed = weights[0.6]
    assert (mixed == 0.4).any() and ((mixed == 0.0) | (mixed == 1.0)).any()
    again = StrengthDrafter(base, Strength(0.4, kappa=0.6))
    again.follow(cont, target.lm_head.weight, target)
    again._start = len(prompt) + 2
    assert torch.equal(again._weights(15), mixed)  # seeded by prompt and root: every method drafts the same


def test_a_strength_drafter_needs_the_continuation_and_valid_parameters(models):
    target, base = models
    with pytest.raises(GraftError, match="strength 0.5 drafts along a known greedy continuation"):
        Decoder.for_method(target, StrengthDrafter(base, Strength(0.5)), "ddtree", 8).decode(random_prompt(1, 8), 8)
    for bad in ({"s": 1.5}, {"s": 0.5, "lam": -0.1}, {"s": 0.5, "kappa": 2.0}, {"s": 0.5, "tau": 0.0}):
        with pytest.raises(GraftError, match="must"):
            Strength(**bad)
    assert StrengthDrafter(base, Strength(0.5)).block_size == base.block_size and torch.is_tensor(
        StrengthDrafter(base, Strength(0.5)).head_weight(target.lm_head.weight))


def _walked(target, n=2, new=40):
    from graftlib.lab.run.strength import Walked

    prompts = [random_prompt(10 + i, 10) for i in range(n)]
    ar = Decoder.for_method(target, None, "ar")
    return Walked("custom", prompts, [ar.decode(p, new).tokens for p in prompts], new)


def test_block_stats_count_the_first_miss_and_what_follows_it():
    from graftlib.lab.run.strength import block_stats

    def block(right, rank):
        return torch.zeros(len(right), 4), torch.tensor(right), torch.tensor(rank)

    trace = [block([True, True, False, True], [0, 0, 1, 0]),   # spine 1 of 2 right; a rank-1 sibling, then right
             block([True, False, False, False], [0, 2, 5, 3]),  # spine 0 of 1; first miss at rank 2: no sibling case
             block([False, False, True, True], [1, 7, 0, 0]),   # first miss rank 1 at depth 1, next wrong
             block([True, False, True, True], [0, OUT_OF_VOCAB, 0, 0]),  # spine 0 of 1; a token the vocabulary lacks
             block([True, False, False, False], [0, PAST_END, PAST_END, PAST_END])]  # the continuation ended
    s = block_stats(trace)
    assert s["spine"] == {"rate": 0.25, "cases": 4}
    assert s["sibling"] == {"rate": 0.5, "cases": 2}
    assert s["first_miss"] == {"rank1": 0.5, "top3": 0.75, "in_vocab": 0.75, "cases": 4}


def test_a_strength_is_fitted_to_a_chain_mat_and_the_rates_are_counted(models):
    from types import SimpleNamespace

    from graftlib.lab.run.strength import fit_lam, fit_strength, mat, run_stats, walked_rounds

    target, base = models
    pair = SimpleNamespace(target=target, drafter=base, eos_ids=[])
    w = _walked(target)
    chain = base.block_size - 1
    real = mat(walked_rounds(pair, Strength(0.0), "dflash", chain, w))
    full = mat(walked_rounds(pair, Strength(1.0), "dflash", chain, w))
    goal = (real + full) / 2
    fit = fit_strength(pair, w, goal, tol=0.02)
    assert 0 < fit["s"] < 1 and abs(fit["mat"] - goal) <= 0.02 * goal
    assert mat(walked_rounds(pair, Strength(fit["s"]), "dflash", chain, w)) == fit["mat"]  # deterministic
    assert fit_strength(pair, w, real / 2)["s"] == 0.0 and fit_strength(pair, w, 99.0)["bound"].startswith("even")
    full_stats = run_stats(pair, Strength(1.0), "ddtree", 16, w)
    assert full_stats["sibling"]["cases"] == 0 and full_stats["spine"]["rate"] == 1.0  # s = 1: the spine is the path
    lam = fit_lam(pair, Strength(0.5), w, 0.0, budget=16)
    assert lam["lam"] == 0.0 and "bound" in lam  # no lam goes below a rate of 0


def test_a_pinned_strength_fits_lam_to_a_tree_mat(models):
    """The `tree` pin: lam such that DDTree's walked MAT meets a goal that lam = 0 misses by more than the 2%
    tolerance (the tree's gain over the chain rises with lam; the chain's MAT does not move)."""
    from types import SimpleNamespace

    from graftlib.lab.run.strength import Walked, fit_lam, mat, run_stats, walked_rounds

    target, base = models
    pair = SimpleNamespace(target=target, drafter=base, eos_ids=[])
    prompts = [random_prompt(i, 12) for i in (3, 5)]
    ar = Decoder.for_method(target, None, "ar")
    w = Walked("custom", prompts, [ar.decode(p, 60).tokens for p in prompts], 60)
    st = Strength(0.6, kappa=0.3)
    low, high = (run_stats(pair, replace(st, lam=x), "ddtree", 64, w)["mat"] for x in (0.0, 1.0))
    goal = high - 0.3 * (high - low)
    assert abs(low - goal) > 0.02 * goal  # lam = 0 does not meet it
    fit = fit_lam(pair, st, w, goal, "tree", budget=64)
    assert fit["lam"] > 0 and "bound" not in fit and abs(fit["mat"] - goal) <= 0.02 * goal
    assert fit["mat"] == mat(walked_rounds(pair, replace(st, lam=fit["lam"]), "ddtree", 64, w))
    assert fit_lam(pair, st, w, 2 * high, "tree", budget=64)["bound"] == "the goal lies past x = 1"
    with pytest.raises(GraftError, match="unknown strength pin 'wide'"):
        fit_lam(pair, st, w, goal, "wide")


def test_the_shipped_calibrations_load_by_name_and_an_unknown_name_lists_them():
    from graftlib.models.strength import CALIBRATIONS, STRENGTH_PATH, TaskStrengths, strength_file

    for name in CALIBRATIONS:
        if not strength_file(name).is_file():
            continue  # a calibration not shipped yet: `graft calibrate-strength` names its file
        ts = TaskStrengths(name)
        assert ts.name == name and ts.of("gsm8k").s > 0
    assert TaskStrengths(STRENGTH_PATH).name == "own-spine"
    assert TaskStrengths("true-path").of("gsm8k").lam == 1.0  # the earlier construction: lam = 1, kappa = 0
    with pytest.raises(GraftError, match=r"^unknown drafter-strength calibration 'wide': the names are own-spine, "
                                         r"true-path, pinned, or give a file's path$"):
        TaskStrengths("wide")


def test_the_tree_gain_knob_moves_lam_then_kappa_and_holds_the_chain(models):
    """g up to 1 is lam; past 1 lam = 1 and kappa falls to 0 at g = 2, s refitted so the chain keeps its MAT."""
    from types import SimpleNamespace

    from graftlib.lab.run.strength import chain_budget, fit_strength, mat, walked_rounds
    from graftlib.lab.run.strength_axis import gain_strength

    target, base = models
    pair = SimpleNamespace(target=target, drafter=base, eos_ids=[])
    w = _walked(target)
    pinned = Strength(0.5, 0.7, lam=0.3, kappa=0.6)
    goal = mat(walked_rounds(pair, replace(pinned, lam=1.0), "dflash", chain_budget(pair), w))
    assert gain_strength(pair, w, pinned, 0.5, goal) == replace(pinned, lam=0.5)
    top = gain_strength(pair, w, pinned, 2.0, goal)
    assert (top.lam, top.kappa) == (1.0, 0.0) and top.s != pinned.s
    fit = fit_strength(pair, w, goal, 0.0)  # the chain's s at kappa = 0: as close to the goal as 2 prompts allow
    assert top.s == fit["s"] and mat(walked_rounds(pair, top, "dflash", chain_budget(pair), w)) == fit["mat"]
    assert abs(fit["mat"] - goal) <= 0.05 * goal
    half = gain_strength(pair, w, pinned, 1.5, goal)
    assert half.kappa == pytest.approx(0.3) and half.lam == 1.0


def test_an_axis_names_where_a_claim_leaves_noise_and_where_its_interval_reaches_the_paper():
    import pandas as pd

    from graftlib.lab.run.strength_axis import axis_summary, turning_points

    T = pd.DataFrame({"tree gain": [1.1, 1.3, 1.5],
                      "C1 ratio": [1.0, 1.15, 1.25], "C1 CI95 low": [0.9, 1.02, 1.1], "C1 CI95 high": [1.1, 1.3, 1.4],
                      "C1 verdict": ["inside noise", "direction only", "reproduced"]}, index=[0.0, 1.0, 2.0])
    t = turning_points(T, {"C1": 1.219, "C9": 2.0})["C1"]  # no C9 column: no C9 row
    assert t == {"direction": 1.0, "interval reaches size": 1.0, "point reaches size": 2.0, "paper size": 1.219}
    assert turning_points(T, {"C1": 1.219}, x="tree gain")["C1"]["direction"] == 1.3
    assert axis_summary(T, {"C1": 1.5}, None, x="tree gain", name="tree gain") == (
        "C1: above 1 outside noise from tree gain = 1.3; its interval reaches the paper's 1.500x at no point of this "
        "axis, its ratio at no point of this axis")


def test_where_lam_cannot_reach_the_trees_mat_kappa_falls_and_the_chain_holds(models):
    """`fit_kappa`: lam = 1, kappa lowered from the shape's, s refitted to the chain's MAT at each kappa; a goal past
    kappa = 0 is a bound; `tree_pinned` sends a short tree-pinned row without a kappa fit back to be refitted."""
    from types import SimpleNamespace

    from graftlib.lab.run.strength import Walked, chain_budget, fit_kappa, mat, run_stats, tree_pinned, walked_rounds

    target, base = models
    pair = SimpleNamespace(target=target, drafter=base, eos_ids=[])
    prompts = [random_prompt(i, 12) for i in (3, 5)]
    ar = Decoder.for_method(target, None, "ar")
    w = Walked("custom", prompts, [ar.decode(p, 60).tokens for p in prompts], 60)
    shape = Strength(0.6, 0.8, lam=1.0, kappa=0.6)
    chain = mat(walked_rounds(pair, shape, "dflash", chain_budget(pair), w))
    far = fit_kappa(pair, shape, w, 99.0, chain, budget=64, steps=1)
    assert far["bound"] == "the goal lies past x = 1" and far["kappa"] == 0.0 and far["strength"].lam == 1.0
    assert far["mat"] == run_stats(pair, far["strength"], "ddtree", 64, w)["mat"]
    assert abs(far["chain_mat"] - chain) <= 0.05 * chain  # the chain kept (2 prompts: within their resolution)
    row = {"pin": "tree", "ddtree_mat_val": 7.2, "paper_ddtree_mat": 7.93, "fit": {"lam": {}}}
    assert not tree_pinned(row) and tree_pinned({**row, "fit": {"kappa": far}})
    assert tree_pinned({**row, "ddtree_mat_val": 7.8}) and tree_pinned({"pin": "sibling"})
