"""Lossless sampling, tested statistically: on a tiny random target with an 8-token vocabulary, the
joint law of the first three generated tokens under every method equals plain AR sampling's, which
is computed exactly (73 forwards enumerate every prefix). Each method decodes N prompts' worth of
seeds and a chi-square test against the exact law must not reject at p < 1e-3 (cells with an
expected count under 5 pooled); two injected bugs must be rejected: the target's token drawn at the
wrong temperature, and a walk that follows the draft's first-ranked child without drawing from the
target. Everything is seeded, so the outcome is deterministic on a given torch build.

N: 10^4 decodes for DDTree and GRAFT (heap trees, TDES-ranked heaps, SABA's AR steps between drafted
rounds); 3,000 for AR (the sampler the exact law describes), the DFlash chain (a one-path tree through
the same walk), +TDES, +SABA and CaDDTree, whose tree shapes the former cover; 1,500 for the
AR-drafted trees (EAGLE-3's dynamic tree and OPT-Tree, drafted depth by depth by a random EAGLE-3
drafter, at depths that keep their drafter forwards affordable); 2,000 for each injected bug (both
are rejected far below the 1e-6 asserted). The suite's time budget sets these counts.
"""

import math

import pytest
import torch
from tiny import eagle3_config, random_eagle3, random_predictor, tiny_drafter, tiny_target

from graftlib.core import decode as decode_module
from graftlib.core.builders import FixedBudget, HeapTreeBuilder
from graftlib.core.decode import DecodeLoop
from graftlib.core.sampling import LazySample, Sampling
from graftlib.core.tree import EDGE_SHIFT
from graftlib.methods.budget_predictor import PredictedBudget
from graftlib.methods.caddtree import CaDDTree
from graftlib.methods.decoder import Decoder, TreeDecoder
from graftlib.methods.eagle_tree import EagleTree
from graftlib.methods.opt_tree import OptTree
from graftlib.methods.saba import SabaController
from graftlib.methods.saba_params import SabaParams
from graftlib.methods.tdes import TDESNet, TDESScorer

pytestmark = pytest.mark.usefixtures("one_thread")

V = 8
MASK = V - 1
PROMPT = [1, 4, 2, 5]
T = 0.6
SAMPLING = Sampling(T, top_p=0.95)
N_MAIN, N_OTHER, N_AR_DRAFTED, N_BUG = 10_000, 3_000, 1_500, 2_000
GATED = SabaParams(c_ar=[0.02, 0.0], max_skip=2, post_gate=False)  # AR steps between drafted rounds


@pytest.fixture(scope="module")
def pair():
    shape = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=16)
    target = tiny_target("llama", seed=3, num_hidden_layers=2, initializer_range=0.2, **shape)
    drafter = tiny_drafter(seed=4, mask_token_id=MASK, block_size=4, target_layer_ids=[0, 1], num_target_layers=2,
                           **shape)
    eagle3 = random_eagle3(eagle3_config(target.config, draft_vocab=V, layer_ids=(0, 1, 1)), target.config, seed=1)
    return target, drafter, eagle3


def scorer_builder(seed: int = 0) -> HeapTreeBuilder:
    torch.manual_seed(seed)
    net = TDESNet(torch.randn(V, 16), 4, 3)
    with torch.no_grad():
        net.u.normal_()
    return TDESScorer.from_net(net, 1.0).builder(3)


def make(pair, method: str, budget: int = 6) -> DecodeLoop:
    target, drafter, eagle3 = pair
    if method in ("eagle3", "opt-tree"):
        policy = EagleTree(depth=3, top_k=4) if method == "eagle3" else OptTree(max_depth=4)
        return TreeDecoder(target, eagle3, policy, FixedBudget(budget), sampling=SAMPLING)
    if method in ("ar", "dflash", "ddtree"):
        return Decoder.for_method(target, drafter, method, 3 if method == "dflash" else budget, sampling=SAMPLING)
    parts = {
        "ddtree+tdes": lambda: (scorer_builder(), FixedBudget(budget)),
        "ddtree+saba": lambda: (HeapTreeBuilder(), SabaController(GATED, cap=budget)),
        "graft": lambda: (scorer_builder(), SabaController(GATED, cap=budget)),
        "caddtree": lambda: (CaDDTree.from_params(GATED, cap=budget),) * 2,
        "graft+stop": lambda: (CaDDTree.from_params(GATED, cap=budget, heap=scorer_builder(), gated=True),) * 2,
        "graft+pred": lambda: (PredictedBudget(random_predictor(3, [1, 2, 4, budget], seed=1, ar_bias=5.0),
                                               scorer_builder(), GATED, cap=budget),) * 2,  # AR steps between probes
    }[method]()
    return DecodeLoop(target, drafter, *parts, sampling=SAMPLING)


@pytest.fixture(scope="module")
def exact_law(pair) -> torch.Tensor:
    """P(x1, x2, x3 | PROMPT) under AR sampling with SAMPLING, [V, V, V], from full forwards."""
    target = pair[0]
    with torch.inference_mode():
        def probs(prefixes: list[list[int]]) -> torch.Tensor:
            logits = target(torch.tensor(prefixes)).logits[:, -1].double()
            return SAMPLING.probs(logits).double()

        p1 = probs([PROMPT])[0]
        p2 = probs([PROMPT + [a] for a in range(V)])  # [V, V]
        p3 = probs([PROMPT + [a, b] for a in range(V) for b in range(V)]).view(V, V, V)
    law = p1[:, None, None] * p2[:, :, None] * p3
    assert abs(float(law.sum()) - 1) < 1e-5
    return law / law.sum()


def sample_law(dec: DecodeLoop, n: int, seed0: int = 0) -> torch.Tensor:
    counts = torch.zeros(V, V, V, dtype=torch.float64)
    for i in range(n):
        dec.sampling = Sampling(T, top_p=SAMPLING.top_p, seed=seed0 + i)
        a, b, c = dec.decode(PROMPT, 3, stop_at_eos=False).tokens
        counts[a, b, c] += 1
    return counts


def chi_square(counts: torch.Tensor, law: torch.Tensor) -> tuple[float, float]:
    """(p-value, total variation distance) of `counts` against `law`, small cells pooled."""
    n = counts.sum()
    expected, observed = (law * n).flatten(), counts.flatten()
    big = expected >= 5
    e = torch.cat([expected[big], expected[~big].sum()[None]])
    o = torch.cat([observed[big], observed[~big].sum()[None]])
    stat = float(((o - e) ** 2 / e.clamp(min=1e-12)).sum())
    df = len(e) - 1
    p = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                      torch.tensor(stat / 2, dtype=torch.float64)))
    tv = 0.5 * float((counts / n - law).abs().sum())
    return p, tv


@pytest.mark.parametrize("method, n", [("ddtree", N_MAIN), ("graft", N_MAIN), ("ar", N_OTHER), ("dflash", N_OTHER),
                                       ("ddtree+tdes", N_OTHER), ("ddtree+saba", N_OTHER),
                                       ("caddtree", N_OTHER), ("graft+stop", N_OTHER), ("graft+pred", N_OTHER),
                                       ("eagle3", N_AR_DRAFTED), ("opt-tree", N_AR_DRAFTED)])
def test_first_three_tokens_follow_ar_sampling(pair, exact_law, method, n):
    dec = make(pair, method)
    counts = sample_law(dec, n)
    p, tv = chi_square(counts, exact_law)
    assert p > 1e-3, f"{method}: chi-square p = {p:.2e}, TV = {tv:.3f} over {n} decodes"
    assert tv < 4 * math.sqrt(V ** 3 / n), tv  # loose sanity bound on the plug-in distance


def test_the_test_rejects_a_wrong_temperature(pair, exact_law, monkeypatch):
    wrong = Sampling(1.0, top_p=SAMPLING.top_p)
    monkeypatch.setattr(decode_module, "LazySample", lambda h, w, s, g: LazySample(h, w, wrong, g))
    p, _ = chi_square(sample_law(make(pair, "ddtree"), N_BUG), exact_law)
    assert p < 1e-6, p


def test_the_test_rejects_following_the_draft(pair, exact_law, monkeypatch):
    def first_child_walk(edges, verdict):
        node, accepted = 0, [0]
        while kids := [c for key, c in edges.items() if key >> EDGE_SHIFT == node]:
            node = min(kids)  # the draft's best child (the first one added), no target draw
            accepted.append(node)
        return accepted, verdict[node]

    monkeypatch.setattr(decode_module, "greedy_walk", first_child_walk)
    p, _ = chi_square(sample_law(make(pair, "ddtree"), N_BUG), exact_law)
    assert p < 1e-6, p


def test_a_seed_reproduces_a_decode_and_t0_is_greedy(pair):
    target, drafter, _ = pair
    dec = Decoder.for_method(target, drafter, "ddtree", 6, sampling=Sampling(1.0, seed=11))
    a = dec.decode(PROMPT, 24, stop_at_eos=False).tokens
    assert dec.decode(PROMPT, 24, stop_at_eos=False).tokens == a
    dec.sampling = Sampling(1.0, seed=12)
    assert dec.decode(PROMPT, 24, stop_at_eos=False).tokens != a
    greedy = Decoder.for_method(target, drafter, "ddtree", 6).decode(PROMPT, 24, stop_at_eos=False).tokens
    ar = Decoder.for_method(target, drafter, "ar").decode(PROMPT, 24, stop_at_eos=False).tokens
    assert greedy == ar
