"""Walk replay: the heap's trees are nested in the budget, a walked a_t(B) equals the verified replay's
(tiny models and the embedded pair, which accepts long paths), pricing by a profile, and a calibration
that decides under a profile."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.builders import Candidates, FixedBudget, HeapTreeBuilder
from graftlib.core.errors import GraftError
from graftlib.core.sampling import Sampling
from graftlib.core.tree import Tree
from graftlib.inputs.cost_profile import CostProfile, RoundShape, with_costs
from graftlib.methods.saba_params import SabaParams
from graftlib.training.graft.calibrate import fit_params, offline_tracking, replay_rounds
from graftlib.training.graft.replay import ReplayDecoder, ReplaySpec, WalkReplay, priced, walk_ranks

GRID = [0, 1, 2, 3, 4, 8, 16, 32]
PROFILE = CostProfile("test-a100", "test", [0.024, 8e-5, 0.0], [0.019, 0.0], 0.009)


def _candidates(seed: int, depth: int = 6, k: int = 12) -> Candidates:
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.permutation(100)[:k] for _ in range(depth)])
    logq = np.sort(np.log(rng.dirichlet(np.ones(k), size=depth)), axis=1)[:, ::-1]
    return Candidates(ids.astype(np.int64), np.ascontiguousarray(logq, dtype=np.float32))


@pytest.mark.parametrize("seed", range(5))
def test_heap_trees_are_nested_in_the_budget(seed):
    cand, b = _candidates(seed), HeapTreeBuilder()
    big = b.build(7, cand, 60)
    for n in (1, 2, 5, 17, 33, 59):
        small = b.build(7, cand, n)
        assert (small.tokens, small.parents) == (big.tokens[:n + 1], big.parents[:n + 1])


def test_walk_ranks_on_a_hand_built_tree():
    # root 5 -> 10 (1) -> 12 (3) -> 14 (4); root -> 11 (2) -> 13 (5)
    tree = Tree([5, 10, 11, 12, 14, 13], [-1, 0, 0, 1, 3, 2], [0, 1, 1, 2, 3, 2])
    assert walk_ranks(tree.tokens, tree.parents, [10, 12, 14, 99]) == [1, 3, 4]
    assert walk_ranks(tree.tokens, tree.parents, [11, 13]) == [2, 5]
    assert walk_ranks(tree.tokens, tree.parents, [10, 99]) == [1]
    assert walk_ranks(tree.tokens, tree.parents, [99]) == []
    # budget 3 holds nodes 1..3: the path 10, 12 (ranks 1, 3) but not 14 (rank 4)
    assert 1 + sum(1 for m in walk_ranks(tree.tokens, tree.parents, [10, 12, 14]) if m <= 3) == 3


def _same_as_verified(target, drafter, prompt, max_new, ref_budget=4, eos_ids=None):
    args = (target, drafter, HeapTreeBuilder(), FixedBudget(ref_budget))
    verified = ReplayDecoder(*args, ReplaySpec(tuple(GRID)), eos_ids).replay(prompt, max_new)
    walked = WalkReplay(*args, ReplaySpec(tuple(GRID), walk=True), eos_ids).replay(prompt, max_new)
    assert walked.decode.tokens[:len(verified.decode.tokens)] == verified.decode.tokens
    got = {(r.round, r.budget, r.reference): r for r in walked.records}
    kept = {r.round for r in walked.records}
    assert kept and kept <= {r.round for r in verified.records}
    for r in verified.records:
        if r.round not in kept or r.reference:
            continue
        w = got[(r.round, r.budget, False)]
        assert (w.accepted, w.nodes, w.tokens, w.prefix_len, w.state) == (r.accepted, r.nodes, r.tokens, r.prefix_len,
                                                                         r.state), (r.round, r.budget)
        assert w.latency == 0.0
    refs = {r.round: r.features for r in verified.records if r.reference}
    for r in walked.records:  # the round's features: one per reference record, the same walked or verified
        assert (r.features is not None) == r.reference
        if r.reference:
            assert r.features == refs[r.round] and len(r.features["q1"]) == drafter.block_size - 1
            assert r.features["mass"] == sorted(r.features["mass"]) and len(r.features["mass"]) == len(GRID)
            assert all(0 < q <= k <= 1.0001 for q, k in zip(r.features["q1"], r.features["qk"], strict=True))
            assert "features" in r.to_dict()
        else:
            assert "features" not in r.to_dict()
    return [r for r in walked.records if not r.reference]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_walked_acceptance_equals_verified_on_tiny_models(arch):
    seed = {"llama": 0, "qwen3": 1}[arch]
    target, drafter = tiny_target(arch, seed=seed, initializer_range=0.1), tiny_drafter(seed=seed)
    _same_as_verified(target, drafter, random_prompt(7, 11), 29)


@pytest.mark.slow(seconds=30)
def test_walked_acceptance_equals_verified_on_the_embedded_pair(embedded_pair):
    ids = embedded_pair.prompt_ids("List the numbers from 1 to 40, separated by commas.")
    grid = _same_as_verified(embedded_pair.target, embedded_pair.drafter, ids, 24, eos_ids=embedded_pair.eos_ids)
    assert max(r.accepted for r in grid) >= 6  # long accepted paths: the walk is tested past the first node


def test_walk_replay_refuses_sampling_and_a_spec_that_does_not_walk():
    target, drafter = tiny_target("llama", seed=0), tiny_drafter(seed=0)
    with pytest.raises(GraftError, match="T = 0"):
        ReplaySpec(tuple(GRID), sampling=Sampling(0.7), walk=True)
    with pytest.raises(GraftError, match="walks its grid"):
        WalkReplay(target, drafter, HeapTreeBuilder(), FixedBudget(4), ReplaySpec(tuple(GRID)))
    with pytest.raises(GraftError, match="walks its grid"):  # a price without a walk
        ReplaySpec(tuple(GRID), profile=PROFILE)


def _pair(target, drafter):
    return SimpleNamespace(target=target, drafter=drafter, eos_ids=None)


def _prompts(*seeds):
    return {str(i): random_prompt(seed, 9 - 5 * i) for i, seed in enumerate(seeds)}


@pytest.mark.usefixtures("one_thread")
def test_priced_records_and_a_calibration_under_a_profile():
    target, drafter = tiny_target("llama", seed=0, initializer_range=0.1), tiny_drafter(seed=0)
    depth = drafter.block_size - 1
    walked = ReplaySpec(tuple(GRID), 20, walk=True)
    records = replay_rounds(_pair(target, drafter), _prompts(11, 12), walked, 4)
    assert all(r.latency == 0 for r in records if not r.reference)
    out = priced(records, PROFILE)
    assert replay_rounds(_pair(target, drafter), _prompts(11, 12), replace(walked, profile=PROFILE), 4) == out
    for r, p in zip(records, out):
        drafted = r.budget > 0 or r.t_draft > 0
        assert p.latency == pytest.approx(PROFILE.round_s(RoundShape(r.budget, r.nodes, r.prefix_len, drafted,
                                                                      rows=r.accepted if r.budget else 0)))
        assert (p.accepted, p.budget, p.state) == (r.accepted, r.budget, r.state)
    assert {p.t_draft for p in out if p.budget > 0} == {PROFILE.c_draft}
    params = fit_params(out, GRID[1:], depth, profile=PROFILE)
    assert (params.c, params.c_ar, params.c_draft, params.cost_table) == (PROFILE.c, PROFILE.c_ar, PROFILE.c_draft,
                                                                          None)
    assert params.meta["cost_profile"] == PROFILE.label and params.meta["fit"]["cost_r2"] is None
    assert params.gain_table is not None and sorted(map(int, params.gain_table)) == GRID[1:]
    assert 0 < offline_tracking(params, out, depth)["mean_retained"] <= 1
    # with_costs keeps the gain side and takes every cost term from the profile
    mine = SabaParams(c=[0.06, 1e-3, 1e-6], c_ar=[0.05, 0.0], c_draft=0.01, cost_table={"4": 0.001})
    moved = with_costs(mine, PROFILE)
    assert (moved.phi, moved.alpha, moved.grid, moved.gain_table) == (mine.phi, mine.alpha, mine.grid, mine.gain_table)
    assert (moved.c, moved.c_ar, moved.c_draft, moved.cost_table) == (PROFILE.c, PROFILE.c_ar, PROFILE.c_draft, None)
    assert moved.id != mine.id and moved.meta["cost_profile"] == PROFILE.label


@pytest.mark.usefixtures("one_thread")
def test_replay_rounds_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    target, drafter = tiny_target("llama", seed=0, initializer_range=0.1), tiny_drafter(seed=0)
    pair, prompts, ck = _pair(target, drafter), _prompts(11, 12), tmp_path / "ck.jsonl"
    spec = ReplaySpec(tuple(GRID), 20, walk=True)
    first = replay_rounds(pair, {"0": prompts["0"]}, spec, 4, checkpoint=ck)
    both = replay_rounds(pair, prompts, spec, 4, checkpoint=ck)
    assert both[:len(first)] == first and len(both) > len(first)

    def no_decoding(*args, **kwargs):
        raise AssertionError("a checkpointed prompt was decoded again")

    monkeypatch.setattr(WalkReplay, "replay", no_decoding)
    assert replay_rounds(pair, prompts, spec, 4, checkpoint=ck) == both
    with pytest.raises(AssertionError, match="decoded again"):  # another setting is not read from it
        replay_rounds(pair, prompts, spec, 8, checkpoint=ck)
