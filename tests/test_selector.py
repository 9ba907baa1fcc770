"""DFlash 2's selector as tree builders (`graftlib.methods.selector`): the chain is the public walk, the heap
with a selector is the plain reference heap under the selector's reweighted log q (with and without TDES on
top), and the methods `dflash2`, `ddtree+sel`, `ddtree+tdes+sel` decode exactly what greedy AR does."""

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from reference_heap import reference_heap
from safetensors.torch import load_file
from tiny import exactness_dflash2, random_prompt, tiny_drafter, tiny_target
from trees import is_chain, validate

from graftlib.core.builders import Candidates, HeapTreeBuilder, top_k
from graftlib.core.errors import GraftError
from graftlib.methods.decoder import Decoder, WalkedDecoder
from graftlib.methods.registry import MethodInputs
from graftlib.methods.selector import Selector, SelectorChain
from graftlib.methods.tdes import TDESNet, TDESScorer
from graftlib.models.drafter import load_drafter

FIXTURE = Path(__file__).parent / "fixtures" / "dflash2"
pytestmark = pytest.mark.usefixtures("one_thread")


def _log_sum_exp(x: np.ndarray) -> float:
    return x.max() + math.log(np.exp(x - x.max()).sum())


def reweighted(selector: Selector, proj: np.ndarray, tdes: TDESScorer | None = None):
    """The reference heap's edge score under a selector, from the definition (float64): log q'(c | p), plus
    TDES's beta f~ (its child score minus log q) when given."""
    def score(token, depth, ids, logq):
        logq = np.asarray(logq, np.float64)
        s = logq + (selector.B[ids].astype(np.float64) * proj[depth - 1]) @ selector.A[token].astype(np.float64)
        out = s - _log_sum_exp(s) + _log_sum_exp(logq)
        return out if tdes is None else out + tdes.child_scores(token, depth, ids, logq) - logq
    return score


def test_the_selector_chain_is_the_public_walk():
    recorded = load_file(FIXTURE / "recorded.safetensors")
    drafter, _ = load_drafter(str(FIXTURE / "checkpoint"), SimpleNamespace(hidden_size=64, vocab_size=128,
                                                                            num_hidden_layers=4))
    with torch.no_grad():
        hidden = drafter(recorded["noise_embedding"], recorded["target_hidden"], start=5)[0, 1:]
        logits = drafter.logits(hidden, recorded["head"])
    selector = Selector.of(drafter, "dflash2")
    cand = Candidates.from_top_k(top_k(logits, selector.top_k, None, hidden), hidden)
    tree = SelectorChain(selector).build(int(recorded["anchor"]), cand, 7)
    assert is_chain(tree) and tree.tokens[1:] == recorded["path"][0].tolist()
    assert tree.tokens[1:] != cand.id_table[:, 0].tolist()  # the walk left the top-1 chain somewhere
    assert all(b < a <= 0 for a, b in zip(tree.scores[1:], tree.scores[2:]))  # running log q' falls


@pytest.mark.parametrize("with_tdes", [False, True])
def test_the_heap_with_a_selector_is_the_reference_heap(with_tdes):
    rng = np.random.default_rng(3 + with_tdes)
    V, D, K, R = 40, 5, 8, 6
    selector = Selector(rng.normal(size=(V, R)).astype(np.float32), rng.normal(size=(V, R)).astype(np.float32),
                        torch.from_numpy(rng.normal(size=(R, 16)).astype(np.float32)), K)
    tdes = None
    if with_tdes:
        torch.manual_seed(0)
        net = TDESNet(torch.randn(V, 12), 4, D)
        tdes = TDESScorer.from_net(net, 1.0)
    differ = 0
    for trial in range(12):
        logits = torch.from_numpy(rng.normal(size=(D, V)).astype(np.float32) * 2)
        hidden = torch.from_numpy(rng.normal(size=(D, 16)).astype(np.float32))
        cand = Candidates.from_top_k(top_k(logits, K, None, hidden), hidden)
        proj = selector.projected(cand).astype(np.float64)
        score = reweighted(selector, proj, tdes)
        for budget in (3, 12, 40):
            fast = HeapTreeBuilder(tdes, selector=selector).build(1, cand, budget)
            ref = reference_heap(1, cand, budget, score)
            validate(fast)
            assert (fast.tokens, fast.parents, fast.depths) == (ref.tokens, ref.parents, ref.depths)
            assert np.allclose(fast.scores, ref.scores, atol=1e-4)
            differ += fast.tokens != HeapTreeBuilder(tdes).build(1, cand, budget).tokens
    assert differ > 0  # the selector changed some trees


@pytest.fixture(scope="module")
def dflash2_pair():
    """A tiny target and a random DFlash 2 drafter whose selector is strong enough to change drafts."""
    return tiny_target("llama", seed=0, initializer_range=0.1), exactness_dflash2("llama")


def test_selector_methods_decode_exactly(dflash2_pair):
    target, drafter = dflash2_pair
    differ = 0
    for seed, n in ((0, 6), (1, 11)):
        prompt = random_prompt(seed, n)
        ar = Decoder.for_method(target, drafter, "ar").decode(prompt, 30).tokens
        for method, budget in (("dflash2", 7), ("dflash2", 3), ("ddtree+sel", 4), ("ddtree+sel", 16)):
            res = Decoder.for_method(target, drafter, method, budget).decode(prompt, 30, record_trees=True)
            assert res.tokens == ar, (method, budget)
            assert all(r.nodes == budget for r in res.rounds)
            walked = WalkedDecoder.for_method(target, drafter, method, budget).decode_along(prompt, ar, 30)
            assert [r.accepted for r in walked.rounds] == [r.accepted for r in res.rounds]  # the paper regime's
            plain = "dflash" if method == "dflash2" else "ddtree"
            other = Decoder.for_method(target, drafter, plain, budget).decode(prompt, 30, record_trees=True)
            differ += res.rounds[0].tree != other.rounds[0].tree
    assert differ > 0


def test_tdes_beside_the_selector_decodes_exactly(dflash2_pair, tmp_path):
    target, drafter = dflash2_pair
    torch.manual_seed(1)
    net = TDESNet(target.get_input_embeddings().weight, 8, drafter.block_size - 1)
    with torch.no_grad():
        net.u.normal_()
        net.s_raw.fill_(math.log(math.expm1(5.0)))
    path = TDESScorer.from_net(net, 2.0).save(tmp_path / "s.safetensors", net)
    prompt = random_prompt(3, 9)
    ar = Decoder.for_method(target, drafter, "ar").decode(prompt, 24).tokens
    both = Decoder.for_method(target, drafter, "ddtree+tdes+sel", 8, inputs=MethodInputs(tdes=str(path))).decode(prompt,
                                                                                                                 24,
                                                                                           record_trees=True)
    assert both.tokens == ar
    trees = {m: [r.tree for r in Decoder.for_method(target, drafter, m, 8, inputs=MethodInputs(tdes=str(path))).decode(
        prompt, 24, record_trees=True).rounds] for m in ("ddtree+tdes", "ddtree+sel")}
    mine = [r.tree for r in both.rounds]
    assert mine != trees["ddtree+tdes"] and mine != trees["ddtree+sel"]  # both terms count


def test_selector_methods_need_a_selector():
    target, drafter = tiny_target("llama", seed=0), tiny_drafter(seed=0)
    for method in ("dflash2", "ddtree+sel"):
        with pytest.raises(GraftError, match="needs a DFlash 2 drafter with a candidate selector"):
            Decoder.for_method(target, drafter, method, 4)
