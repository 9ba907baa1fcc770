"""Trace rounds and the mismatch metric (hand-built trees), and trace collection on a tiny model + resume."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.cli import build_parser
from graftlib.core.errors import GraftError
from graftlib.training.graft.traces import (
    TraceConfig,
    TraceRound,
    collect_traces,
    could_continue,
    is_loose_mismatch,
    is_mismatch,
    load_traces,
    mismatch_stats,
    read_shard,
    write_shard,
)

# Hand-built pools: D = 3, K = 3; ids per depth.
POOLS = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
LOGQ = [[-0.1, -1.0, -2.0]] * 3


def rnd(tokens, parents, target_next, accepted, pools=POOLS):
    depths = [0]
    for p in parents[1:]:
        depths.append(depths[p] + 1)
    return TraceRound(tokens, parents, depths, target_next, accepted, pools, LOGQ)


def test_mismatch_strict():
    # root 0 -> 1 (node 1) -> 4 (node 3); root -> 2 (node 2) -> 5 (node 4)
    # target: after root 1 (accept node 1), after 1 comes 5, which hangs under node 2 instead
    r = rnd([0, 1, 2, 4, 5], [-1, 0, 0, 1, 2], [1, 5, 9, 9, 9], [0, 1])
    assert r.last == 1 and r.bonus == 5 and could_continue(r)
    assert is_mismatch(r) and is_loose_mismatch(r)


def test_mismatch_loose_only():
    # t* = 6 is in the depth-2 pool but nowhere in the tree
    r = rnd([0, 1, 2, 4, 5], [-1, 0, 0, 1, 2], [1, 6, 9, 9, 9], [0, 1])
    assert not is_mismatch(r) and is_loose_mismatch(r)


def test_no_mismatch_out_of_pool():
    # t* = 30 is nowhere in the pool
    r = rnd([0, 1, 2, 4, 5], [-1, 0, 0, 1, 2], [1, 30, 9, 9, 9], [0, 1])
    assert could_continue(r) and not is_mismatch(r) and not is_loose_mismatch(r)


def test_mismatch_same_depth_only():
    # t* = 5 appears in the tree, but at depth 1 (wrong depth): no mismatch
    pools = [[1, 5, 3], [4, 6, 2], [7, 8, 9]]
    r = rnd([0, 5, 1, 4, 6], [-1, 0, 0, 2, 2], [1, 9, 5, 9, 9], [0, 2], pools)
    assert r.bonus == 5 and not is_mismatch(r) and not is_loose_mismatch(r)


def test_full_depth_cannot_continue():
    # a chain of D = 3 accepted nodes: nothing left to draft, never counted
    r = rnd([0, 1, 4, 7, 2, 5], [-1, 0, 1, 2, 0, 4], [1, 4, 7, 8, 9, 8], [0, 1, 2, 3])
    assert not could_continue(r) and not is_mismatch(r) and not is_loose_mismatch(r)
    # the same tree with a 4-deep drafter could have continued (explicit D)
    assert could_continue(r, max_depth=4)


def test_root_rejection_mismatch_and_stats():
    # nothing accepted: p* = root, t* = 2 is at depth 1 -> it would be a child of the root, so the walk
    # would have accepted it; here t* = 5 sits at depth 2 under node 1: not depth 1 -> no strict mismatch
    r0 = rnd([0, 1, 5], [-1, 0, 1], [3, 9, 9], [0])
    assert not is_mismatch(r0) and is_loose_mismatch(r0)  # 3 is in the depth-1 pool
    r1 = rnd([0, 1, 2, 4, 5], [-1, 0, 0, 1, 2], [1, 5, 9, 9, 9], [0, 1])
    r2 = rnd([0, 1, 4, 7, 2, 5], [-1, 0, 1, 2, 0, 4], [1, 4, 7, 8, 9, 8], [0, 1, 2, 3])
    s = mismatch_stats([r0, r1, r2])
    assert s["rounds"] == 3 and s["eligible"] == 2 and s["mismatch"] == 1 and s["loose_mismatch"] == 2
    assert s["rate"] == 0.5 and s["loose_rate"] == 1.0
    assert s["mat"] == pytest.approx((1 + 2 + 4) / 3)


def test_no_pools_needs_depth():
    r = TraceRound([0, 1], [-1, 0], [0, 1], [1, 2], [0, 1])
    with pytest.raises(GraftError, match="max_depth"):
        could_continue(r)
    assert could_continue(r, max_depth=2) and not is_mismatch(r, max_depth=2)


def test_shard_round_trip(tmp_path):
    r = rnd([0, 1, 2, 4, 5], [-1, 0, 0, 1, 2], [1, 5, 9, 9, 9], [0, 1])
    r.logit_nodes, r.child_logits, r.prompt, r.prefix_len = [0, 1], torch.tensor([[1.0, 2, 3], [4, 5, 6]]), 7, 11
    write_shard(tmp_path / "s.safetensors", [r, r])
    got = read_shard(tmp_path / "s.safetensors")
    assert len(got) == 2
    for g in got:
        assert (g.tokens, g.parents, g.depths, g.target_next, g.accepted_nodes) == \
               (r.tokens, r.parents, r.depths, r.target_next, r.accepted_nodes)
        assert torch.equal(g.cand_ids, r.cand_ids) and torch.equal(g.cand_logq, r.cand_logq)
        assert g.logit_nodes == [0, 1] and torch.equal(g.child_logits.float(), r.child_logits)
        assert (g.prompt, g.prefix_len) == (7, 11)


def test_cli_registered():
    p = build_parser()
    args = p.parse_args(["traces", "--out", "x", "--n", "3", "--budget", "8", "--max-new-tokens", "16"])
    assert args.n == 3 and args.budget == 8 and args.pool == "tdes"
    args = p.parse_args(["train-tdes", "--traces", "x", "--out", "y"])
    assert args.epochs == 8 and args.lambda_bce == 0.25


# ---------------------------------------------------------------- collection on a tiny model

@pytest.fixture(scope="module")
def tiny_pair(one_thread):
    return tiny_target("llama", seed=0, initializer_range=0.1), tiny_drafter(seed=0)


def test_collect_and_resume(tiny_pair, tmp_path):
    target, drafter = tiny_pair
    prompts = [random_prompt(s, n) for s, n in ((0, 5), (1, 9), (2, 3), (3, 7))]
    logs = []
    kw = dict(settings={"target": "tiny"}, log=logs.append)
    pair, cfg = SimpleNamespace(target=target, drafter=drafter, eos_ids=None), TraceConfig(budget=6, max_new_tokens=20,
                                                                                           shard_size=2)
    index = collect_traces(pair, prompts[:3], tmp_path, cfg, **kw)
    assert [s["count"] for s in index["shards"]] == [2, 1]
    assert all(s["replay_disagree"] == 0 for s in index["shards"])
    _, rounds = load_traces(tmp_path)
    assert {r.prompt for r in rounds} == {0, 1, 2}
    D = drafter.block_size - 1
    lm_head = target.lm_head.weight
    prefix = {}
    for r in rounds:
        assert r.cand_ids.shape == (D, 6) and r.accepted_nodes[0] == 0
        assert len(r.logit_nodes) == sum(d < D for d in r.depths)  # every verified node below depth D
        # the target's full-forward logits at each node, restricted to the next depth's pool
        start = prefix.setdefault(r.prompt, list(prompts[r.prompt]))
        for j, n in enumerate(r.logit_nodes):
            path, k = [], n
            while k > 0:
                path.append(r.tokens[k])
                k = r.parents[k]
            ids = start + [r.tokens[0]] + path[::-1]
            with torch.inference_mode():
                h = target.model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
            want = (lm_head @ h)[r.cand_ids[r.depths[n]]]
            assert torch.allclose(r.child_logits[j].float(), want, atol=2e-2)
            assert int((lm_head @ h).argmax()) == r.target_next[n]
        prefix[r.prompt] = start + [r.tokens[0]] + [r.tokens[a] for a in r.accepted_nodes[1:]]
    # resume: nothing to redo; a larger prompt list only adds the missing shard
    first = (tmp_path / "shard-00000.safetensors").stat().st_mtime_ns
    collect_traces(pair, prompts[:3], tmp_path, cfg, **kw)
    assert "0 to make" in logs[-1] or any("0 to make" in x for x in logs[-2:])
    index = collect_traces(pair, prompts, tmp_path, cfg, **kw)
    assert (tmp_path / "shard-00000.safetensors").stat().st_mtime_ns == first
    assert [s["count"] for s in sorted(index["shards"], key=lambda s: s["first"])] == [2, 2]
    assert {r.prompt for r in load_traces(tmp_path)[1]} == {0, 1, 2, 3}
    uid_dir = tmp_path / "with-uids"  # the task filter reads the uids the index records
    collect_traces(pair, prompts, uid_dir, cfg, uids=["gsm8k/a", "mbpp/b", "gsm8k/c", "alpaca/d"], **kw)
    assert {r.prompt for r in load_traces(uid_dir, ["gsm8k"])[1]} == {0, 2}
    assert {r.prompt for r in load_traces(uid_dir, ["mbpp", "alpaca"])[1]} == {1, 3}
    with pytest.raises(GraftError, match="cannot filter by task"):
        load_traces(tmp_path, ["gsm8k"])
    with pytest.raises(GraftError, match="no trace rounds"):
        load_traces(uid_dir, ["humaneval"])
    with pytest.raises(GraftError, match="other settings"):
        collect_traces(pair, prompts, tmp_path, replace(cfg, budget=8), **kw)
    retrained = dict(kw, settings={"target": "tiny", "drafter_id": "0123456789ab"})
    with pytest.raises(GraftError, match="drafter_id '\\?' \\(asked '0123456789ab'\\)"):
        collect_traces(pair, prompts, tmp_path, cfg, **retrained)
