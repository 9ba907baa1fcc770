"""Exactness verdicts (`graftlib.core.exactness`) in bfloat16, the numerics of the GPU path, on the CPU.

- the tolerance follows the dtype and the logits' scale, and a difference at a gap above it, or at a
  token far from the top, is a mismatch, never a tie;
- every tree method on the tiny pairs in bfloat16: each decode exact or a certified tie;
- injected bugs are still found in bfloat16: a wrong ancestor in the verify mask, and an accepted
  path that follows the draft instead of the target, give `mismatch` verdicts;
- `graft bench` records carry the verdict, and the summary counts ties and mismatches.
"""

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
from tiny import exactness_eagle3, exactness_pair, exactness_prompts

import graftlib.core.decode as decode_module
from graftlib.core.exactness import FLOAT32_TOL, NEAR_TIE_ULPS, Verdict, near_tie_tol, verdict
from graftlib.core.tree import EDGE_SHIFT, Tree
from graftlib.lab.report.metrics import exactness_cell, summarize, verdict_of
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import AR_METHODS, MethodInputs
from graftlib.methods.saba_params import SabaParams

pytestmark = pytest.mark.usefixtures("one_thread")
NEW = 32
RUNS = [("dflash", 3), ("ddtree", 8), ("ddtree", 64), ("ddtree+saba", 16), ("caddtree", 16), ("eagle3", 59),
        ("opt-tree", 8)]


def test_tolerance_follows_dtype_and_scale():
    assert near_tie_tol(torch.float32, 20.0) == FLOAT32_TOL
    assert near_tie_tol(torch.bfloat16, 20.0) == NEAR_TIE_ULPS * 0.125  # bf16 spacing in [16, 32): 2^-7 * 16
    assert near_tie_tol(torch.bfloat16, 40.0) == 2 * near_tie_tol(torch.bfloat16, 20.0)
    assert near_tie_tol(torch.float16, 20.0) == NEAR_TIE_ULPS * 2.0 ** -10 * 16
    assert near_tie_tol(torch.bfloat16, 0.01) == FLOAT32_TOL  # never below the float32 tolerance


class Logits:
    """A target whose next-token logits are fixed (the verdict's plain forward reads only the last row)."""

    def __init__(self, row: list[float], dtype=torch.bfloat16):
        self.row, self.dtype, self.device = torch.tensor(row), dtype, torch.device("cpu")

    def __call__(self, ids):
        return SimpleNamespace(logits=self.row.expand(1, ids.shape[1], -1).to(self.dtype))


def test_a_gap_above_the_tolerance_is_a_mismatch():
    tol = near_tie_tol(torch.bfloat16, 20.0)
    at_tol = verdict(Logits([20.0, 20.0 - tol, 0.0]), [2], [0, 0], [0, 1])
    assert at_tol.kind == "tie" and at_tol.divergence.top2_gap == tol and at_tol.divergence.position == 1
    above = verdict(Logits([20.0, 20.0 - 2 * tol, 0.0]), [2], [0, 0], [0, 1])
    assert above.kind == "mismatch" and above.divergence.top2_gap == 2 * tol
    far = verdict(Logits([20.0, 20.0, 0.0]), [2], [0], [2])  # ours is not near the top, AR's is
    assert far.kind == "mismatch" and far.divergence.top2_gap == 20.0
    assert verdict(Logits([20.0, 20.0 - tol, 0.0], torch.float32), [2], [0], [1]).kind == "mismatch"
    short = verdict(Logits([1.0, 0.0]), [2], [0, 0], [0])  # a length difference is never a tie
    assert short.kind == "mismatch" and math.isinf(short.divergence.top2_gap)
    assert short.to_dict()["divergence"]["top2_gap"] is None and Verdict("exact").to_dict()["divergence"] is None


@pytest.fixture(scope="module")
def bf16_pairs():
    """Per architecture: (target, drafter, EAGLE-3 drafter, prompts, AR references), all in bfloat16."""
    out = {}
    for arch in ("llama", "qwen3"):
        target, drafter = exactness_pair(arch)
        eagle3 = exactness_eagle3(target, arch)
        target, drafter, eagle3 = (m.to(torch.bfloat16) for m in (target, drafter, eagle3))
        prompts = exactness_prompts(arch)
        refs = [Decoder.for_method(target, None, "ar").decode(p, NEW).tokens for p in prompts]
        out[arch] = (target, drafter, eagle3, prompts, refs)
    return out


def verdicts(pair, method: str, budget: int) -> list[Verdict]:
    target, drafter, eagle3, prompts, refs = pair
    dec = Decoder.for_method(target, eagle3 if method in AR_METHODS else drafter, method, budget,
                             inputs=MethodInputs(saba=SabaParams()))
    return [verdict(target, p, ref, dec.decode(p, NEW).tokens) for p, ref in zip(prompts, refs)]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("method,budget", RUNS, ids=[f"{m}@{b}" for m, b in RUNS])
def test_every_method_in_bfloat16_is_exact_or_a_tie(bf16_pairs, arch, method, budget):
    kinds = [v.kind for v in verdicts(bf16_pairs[arch], method, budget)]
    assert "mismatch" not in kinds, kinds


def wrong_ancestor(verify_inputs):
    """The bug: a causal mask over the flattened tree, so every node also attends to the earlier nodes
    that are not its ancestors (positions and the walk's edges stay right)."""
    def bugged(tree, start, device, dtype, masks=None):
        right = verify_inputs(tree, start, device, dtype, masks)
        parents = [tree.parents[0]] + list(range(len(tree.tokens) - 1))
        wrong = verify_inputs(Tree(tree.tokens, parents, tree.depths), start, device, dtype, None)
        return dataclasses.replace(wrong, edges=right.edges, parents=right.parents)
    return bugged


def follow_the_draft(edges, target_next):
    """The bug: accept the draft's first child at every depth, never checking the target's token."""
    node, accepted = 0, [0]
    while kids := [c for key, c in edges.items() if key >> EDGE_SHIFT == node]:
        node = min(kids)
        accepted.append(node)
    return accepted, target_next[node]


@pytest.mark.parametrize("bug", ["wrong_ancestor", "follow_the_draft"])
def test_injected_bugs_are_mismatches_in_bfloat16(bf16_pairs, monkeypatch, bug):
    if bug == "wrong_ancestor":
        monkeypatch.setattr(decode_module, "verify_inputs", wrong_ancestor(decode_module.verify_inputs))
    else:
        monkeypatch.setattr(decode_module, "greedy_walk", follow_the_draft)
    kinds = [v.kind for arch in ("llama", "qwen3") for v in verdicts(bf16_pairs[arch], "ddtree", 64)]
    assert kinds.count("mismatch") >= 3, kinds


def test_summary_counts_ties_and_mismatches():
    recs = [{"key": "ar", "method": "ar", "budget": None, "uid": "a", "rounds": 4, "accepted_sum": 4, "nodes_sum": 0,
             "new_tokens": 5, "decode_s": 1.0, "stage_s": dict.fromkeys(("draft", "tree", "verify", "commit"), 0.0),
             "matches_ar": None}]
    recs += [dict(recs[0], key="ddtree@8", method="ddtree", budget=8, uid=u, matches_ar=m, verdict=v)
             for u, m, v in (("a", False, "tie"), ("b", True, "exact"), ("c", False, "tie"))]
    recs.append(dict(recs[1], uid="d", verdict=None, matches_ar=False))  # written before verdicts: a mismatch
    assert [verdict_of(r) for r in recs] == [None, "tie", "exact", "tie", "mismatch"]
    row = next(r for r in summarize(recs) if r["key"] == "ddtree@8")
    assert (row["ties"], row["mismatches"], row["exact"]) == (2, 1, False) and exactness_cell(row) == "1 MISMATCH"
    assert exactness_cell(dict(row, mismatches=0)) == "2 tie" and exactness_cell(dict(row, ties=0,
                                                                                      mismatches=0)) == "yes"
