"""Exactness on the real embedded model: every method and budget reproduces greedy AR decoding.

Four real prompts of different kinds, 64 new tokens, the shipped embedded drafter (whatever its
training state: exactness must not depend on drafter quality). Any difference must be a genuine
top-2 near-tie of the target's logits (graftlib.core.exactness), never a loosened comparison.
"""

import pytest

from graftlib.core.exactness import check_exact
from graftlib.core.hardware import hardware_id
from graftlib.methods.budget_predictor import DEFAULT_PREDICTOR, BudgetPredictor
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import SHIPPED_INPUTS, MethodInputs

PROMPTS = [
    ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
     "How many clips did Natalia sell altogether in April and May?\nPlease reason step by step, and put "
     "your final answer within \\boxed{}."),
    "Write a python function to find the first repeated character in a given string.",
    "Give three tips for staying healthy.",
    ("Problem Statement: The `mean` function crashes with ZeroDivisionError on an empty list. "
     "Please fix the issue described above."),
]
MAX_NEW = 64
# The CI budget (20 min for the suite) keeps one chain, DDTree below, at and beyond the candidate
# pool (8, 64, 256) and every shipped-artifact method; the other budgets (dflash@7, ddtree@1, @32)
# run on the tiny models (tests/test_exact_tiny.py) and in `experiments/device-check.sh`'s exactness section.
RUNS = ([("dflash", 15)] + [("ddtree", b) for b in (8, 64, 256)]
        # shipped TDES / SABA
        + [("ddtree+tdes", 32), ("ddtree+saba", 64), ("graft", 64), ("caddtree", 64), ("graft+stop", 64),
           ("graft+pred", 64)])

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def references(embedded_pair):
    ar = Decoder.for_method(embedded_pair.target, None, "ar", eos_ids=embedded_pair.eos_ids)
    out = {}
    for text in PROMPTS:
        ids = embedded_pair.prompt_ids(text)
        out[text] = (ids, ar.decode(ids, MAX_NEW).tokens)
    return out


@pytest.mark.parametrize("method,budget", RUNS, ids=[f"{m}@{b}" for m, b in RUNS])
def test_embedded_matches_ar(embedded_pair, references, method, budget, tmp_path):
    p = embedded_pair
    inputs = SHIPPED_INPUTS
    if method == "graft+pred":  # the shipped weights, taken as this machine's (a predictor is refused elsewhere)
        pred = BudgetPredictor.load(DEFAULT_PREDICTOR)
        pred.meta["hardware"] = hardware_id(p.target.device, p.target.dtype)
        inputs = MethodInputs(predictor=str(pred.save(tmp_path / "predictor.json")))
    dec = Decoder.for_method(p.target, p.drafter, method, budget, eos_ids=p.eos_ids, inputs=inputs)
    n = MAX_NEW // 2 if budget >= 256 else MAX_NEW  # 257-node verifies cost ~0.5 s each on 2 cores
    for ids, ref in references.values():
        res = dec.decode(ids, n)
        check_exact(p.target, ids, ref[:n], res.tokens)
        assert all(r.nodes <= budget for r in res.rounds)
        assert sum(r.accepted for r in res.rounds) >= len(res.tokens) - 1  # every token came from a round


def test_shipped_drafter_is_trained_and_accepts(embedded_pair, references):
    p = embedded_pair
    assert p.drafter_trained and p.drafter.id_map is not None  # the 8k-vocabulary checkpoint is loaded
    dec = Decoder.for_method(p.target, p.drafter, "ddtree", 32, eos_ids=p.eos_ids)
    rounds = [r for ids, _ in references.values() for r in dec.decode(ids, MAX_NEW).rounds]
    mat = sum(r.accepted for r in rounds) / len(rounds)
    assert mat > 1.3, f"DDTree(32) accepts {mat:.2f} tokens per round with the shipped drafter"


def test_references_are_nontrivial(references):
    # the comparison must cover long outputs, not just an immediate EOS
    assert sum(len(ref) for _, ref in references.values()) >= 2 * MAX_NEW


def test_gated_graft_mixes_ar_steps_and_stays_exact(embedded_pair, references):
    """SABA's AR gates on the real model: with an AR step made (artificially) cheap, the pre-draft
    gate alone mixes plain AR steps, probe rounds and drafted rounds; with the post-draft gate too,
    probes are drafted and then declined (AR steps after a draft). Both still equal greedy AR."""
    from dataclasses import replace

    from graftlib.core.builders import HeapTreeBuilder
    from graftlib.methods.saba import SabaController
    from graftlib.methods.saba_params import default_params

    p = embedded_pair
    params = replace(default_params(), c_ar=[0.02, 0.0], max_skip=4)
    for post in (False, True):
        for ids, ref in references.values():
            ctl = SabaController(replace(params, post_gate=post), cap=16)
            res = Decoder(p.target, p.drafter, HeapTreeBuilder(), ctl, p.eos_ids).decode(ids, MAX_NEW)
            check_exact(p.target, ids, ref, res.tokens)
            if post:
                assert any(r.budget == 0 and r.t_draft > 0 for r in res.rounds), "expected declined drafts"
            else:
                kinds = {r.budget == 0 for r in res.rounds}
                assert kinds == {True, False}, "expected both AR steps and drafted rounds"
