"""TDES: scorer arithmetic (eqs. 4-6), the heap under S_TDES vs brute force, learning on synthetic
traces, save/load, and exactness of decoding with a TDES builder on a tiny model."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from reference_heap import reference_heap
from test_builders import ROOT, check_structure, greedy_frontier, make_cand, root_paths
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.builders import FixedBudget, HeapTreeBuilder
from graftlib.core.errors import GraftError
from graftlib.core.tree import greedy_walk, verify_inputs
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import MethodInputs
from graftlib.methods.saba_params import default_params
from graftlib.methods.tdes import TDESNet, TDESScorer, scorer_id
from graftlib.training.graft.tdes_train import TDESConfig, build_data, mismatch_pairs, train_tdes
from graftlib.training.graft.traces import TraceRound, collect_prompt, mismatch_stats

pytestmark = pytest.mark.usefixtures("one_thread")

V, E = 100, 24  # ROOT = 99 must be a valid token id


def random_scorer(seed: int, beta: float, depths: int = 4, m: int = 8, scale: float = 3.0, vocab: int = V):
    torch.manual_seed(seed)
    net = TDESNet(torch.randn(vocab, E), m, depths)
    with torch.no_grad():
        net.u.normal_()
        net.s_raw.fill_(math.log(math.expm1(scale)))
    return TDESScorer.from_net(net, beta), net


def brute_f(net: TDESNet, p: int, d: int, ids: list[int]) -> np.ndarray:
    """eq. 6 straight from the definition, float64."""
    e = net.embed.double()
    gp = e[p] @ net.g_p.weight.double().T + net.g_p.bias.double()
    gc = e[ids] @ net.g_c.weight.double().T + net.g_c.bias.double()
    u = net.u[d - 1].double()
    return (net.s.item() * ((gc + u) @ (gp + u)) / math.sqrt(net.m)).detach().numpy()


# ---------------------------------------------------------------- scorer arithmetic

@pytest.mark.parametrize("seed", range(3))
def test_beta_zero_is_ddtree(seed):
    scorer, _ = random_scorer(seed, beta=0.0)
    cand = make_cand(depth=4, vocab=V - 1, k=6, seed=seed)
    for budget in (1, 5, 17, 60, 500):
        a = HeapTreeBuilder().build(ROOT, cand, budget)
        b = HeapTreeBuilder(scorer, name="tdes").build(ROOT, cand, budget)
        assert (a.tokens, a.parents, a.depths, a.scores) == (b.tokens, b.parents, b.depths, b.scores)


def f_of(scorer, parent: int, depth: int, ids) -> np.ndarray:
    """f_theta(p, c, d) of eq. 6 from the scorer's tables, term by term (the plain reference of the heap's scores)."""
    u = scorer.u[depth - 1]
    return (scorer.C[np.asarray(ids)] + u) @ ((scorer.P[parent] + u) * scorer.scale)


def f_centred(scorer, parent: int, depth: int, ids) -> np.ndarray:
    """f~ (eq. 5): f minus its mean over C_{p,d} = ids."""
    f = f_of(scorer, parent, depth, ids)
    return f - f.mean()


def test_centring_sums_to_zero():
    scorer, _ = random_scorer(1, beta=0.7)
    cand = make_cand(depth=4, vocab=V - 1, k=7, seed=3)
    for d in range(1, 5):
        for p in (ROOT, 0, 5, 42):
            ft = f_centred(scorer, p, d, cand.ids[d - 1])
            assert abs(ft.sum()) < 1e-4 and ft.std() > 1e-3
            s = np.array(scorer.child_scores(p, d, cand.ids[d - 1], cand.logq[d - 1])) - np.array(cand.logq[d - 1])
            assert abs(s.sum()) < 1e-4  # the residual beta * f~ is centred over C_{p,d}


@pytest.mark.parametrize("beta", [0.2, 1.5])
def test_child_scores_match_brute_force(beta):
    scorer, net = random_scorer(2, beta)
    cand = make_cand(depth=4, vocab=V - 1, k=5, seed=4)
    for d in range(1, 5):
        ids, lq = cand.ids[d - 1], cand.logq[d - 1]
        for p in (ROOT, 3, 77):
            f = brute_f(net, p, d, ids)
            want = np.array(lq) + beta * (f - f.mean())
            got = scorer.child_scores(p, d, ids, lq)
            assert got == pytest.approx(want.tolist(), abs=1e-4)
            assert np.argsort(-np.array(got)).tolist() == np.argsort(-want).tolist()
            assert f_of(scorer, p, d, ids) == pytest.approx(f.tolist(), abs=1e-4)
    with pytest.raises(GraftError, match="depths 1..4"):
        scorer.child_scores(ROOT, 5, cand.ids[0], cand.logq[0])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [3, 10, 40])
def test_heap_is_best_first_under_tdes(seed, budget):
    scorer, _ = random_scorer(seed, beta=1.5)
    cand = make_cand(depth=3, vocab=V - 1, k=4, seed=10 + seed)

    def edge(p, d, c, lq):
        ids = cand.ids[d - 1]
        return lq + scorer.beta * float(f_centred(scorer, p, d, ids)[ids.index(c)])

    tree = HeapTreeBuilder(scorer, name="tdes").build(ROOT, cand, budget)
    check_structure(tree)
    want_set, want_order = greedy_frontier(cand, budget, edge)
    assert root_paths(tree) == want_set
    paths = {0: ()}
    for i in range(1, len(tree.tokens)):
        paths[i] = paths[tree.parents[i]] + (tree.tokens[i],)
    assert [paths[i] for i in range(1, len(tree.tokens))] == want_order  # popped in S_TDES order
    assert root_paths(tree) != root_paths(HeapTreeBuilder().build(ROOT, cand, budget)) or budget >= 40


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("budget", [1, 6, 25, 80])
def test_the_compiled_tdes_heap_builds_the_child_scores_tree(seed, budget):
    """The builder's compiled heap, scoring inside it from the scorer's tables, builds the tree of the
    reference heap over `child_scores` (the numpy scores of one pool per call)."""
    scorer, _ = random_scorer(seed, beta=1.5)
    cand = make_cand(depth=4, vocab=V - 1, k=12, seed=30 + seed)
    a = scorer.builder(4).build(ROOT, cand, budget)
    b = reference_heap(ROOT, cand, budget, scorer.child_scores)
    check_structure(a)
    assert (a.tokens, a.parents, a.depths) == (b.tokens, b.parents, b.depths)
    assert a.scores == pytest.approx(b.scores, abs=1e-5)


# ---------------------------------------------------------------- learning on synthetic traces

SV, SD, SK, SB = 32, 3, 6, 8  # vocab, depth, pool size, budget


def rule(t: int) -> int:
    return (5 * t + 3) % SV


def synthetic_round(rng: np.random.Generator, builder: HeapTreeBuilder) -> TraceRound:
    """Pools where depth d+1 holds the rule children of depth d's best tokens (in shuffled log q order);
    the target always continues token t with rule(t)."""
    from graftlib.core.builders import Candidates

    root = int(rng.integers(SV))
    ids, prev = [], [root]
    for _ in range(SD):
        want = list(dict.fromkeys(rule(t) for t in prev[:4]))
        extra = [int(t) for t in rng.permutation(SV) if int(t) not in want][:SK - len(want)]
        pool = [int(t) for t in rng.permutation(want + extra)]
        ids.append(pool)
        prev = pool
    logq = [sorted((-rng.exponential(1.0, SK)).tolist(), reverse=True) for _ in range(SD)]
    cand = Candidates(ids, logq, [math.exp(x[0]) for x in logq])
    tree = builder.build(root, cand, SB)
    target_next = [rule(t) for t in tree.tokens]
    accepted, _ = greedy_walk(verify_inputs(tree, 0).edges, target_next)
    nodes = [n for n in range(len(tree.tokens)) if tree.depths[n] < SD]
    z = torch.tensor([[4.0 * (c == rule(tree.tokens[n])) for c in ids[tree.depths[n]]] for n in nodes])
    return TraceRound(tree.tokens, tree.parents, tree.depths, target_next, accepted, ids, logq, nodes, z,
                      prompt=int(rng.integers(1 << 30)))


def test_learns_synthetic_rule():
    rng = np.random.default_rng(0)
    train = [synthetic_round(rng, HeapTreeBuilder()) for _ in range(400)]
    data = build_data(train)
    sizes = data.sizes()
    assert sizes["kl_groups"] > 0 and sizes["pairs"] > 0 and 0 < sizes["positive_edges"] < sizes["edges"]
    torch.manual_seed(0)
    embed = torch.randn(SV, 40)
    cfg = TDESConfig(m=32, beta=1.0, epochs=10, lr=3e-2, batch_groups=64, val_fraction=0.1)
    scorer, _, summary = train_tdes(train, embed, cfg, log=lambda *_: None)
    hist = summary["history"]
    assert hist[-1]["total"] < 0.5 * hist[0]["total"]
    assert hist[-1]["val_total"] < hist[0]["val_total"]  # the held-out rounds' eq. 12 falls too, epoch by epoch
    assert summary["val_top1_agreement"]["tdes"] > summary["val_top1_agreement"]["ddtree"]
    # held-out rounds built by DDTree and by TDES from the same pools and log q
    dd = [synthetic_round(np.random.default_rng(1000 + i), HeapTreeBuilder()) for i in range(200)]
    td = [synthetic_round(np.random.default_rng(1000 + i), scorer.builder(SD)) for i in range(200)]
    before, after = mismatch_stats(dd), mismatch_stats(td)
    assert before["rate"] > 0.03 and before["loose_rate"] > 0.5
    assert after["rate"] < before["rate"] and after["loose_rate"] < 0.5 * before["loose_rate"]
    assert after["mat"] > before["mat"]


def test_mismatch_pairs_kinds():
    # root 0 -> 1 (acc) -> 4 ; root -> 2 -> 5 ; t* after token 1 is 5 (hangs under token 2)
    r = TraceRound([0, 1, 2, 4, 5], [-1, 0, 0, 1, 2], [0, 1, 1, 2, 2], [1, 5, 9, 9, 9], [0, 1],
                   [[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[-0.1, -1.0, -2.0]] * 3)
    assert sorted(mismatch_pairs(r)) == sorted([(1, 5, 2, 5, 2), (1, 5, 1, 4, 2)])


# ---------------------------------------------------------------- storage

@pytest.mark.parametrize("form", ["dir", "file"])
def test_save_load_round_trip(tmp_path, form):
    scorer, net = random_scorer(5, beta=0.3)
    scorer.config = {"target": "tiny", "data": {"rounds": 3}}
    path = tmp_path / ("scorer" if form == "dir" else "x.safetensors")
    scorer.save(path, net)
    got = TDESScorer.load(path, net.embed)
    assert (got.beta, got.m, got.depths, got.vocab) == (0.3, 8, 4, V)
    assert path.with_suffix(".json").is_file() or (path / "tdes.json").is_file()
    assert got.config["target"] == "tiny" and got.config["data"] == {"rounds": 3}
    cand = make_cand(depth=4, vocab=V - 1, k=6, seed=0)
    for d in range(1, 5):
        assert np.array_equal(got.child_scores(7, d, cand.ids[d - 1], cand.logq[d - 1]),
                              scorer.child_scores(7, d, cand.ids[d - 1], cand.logq[d - 1]))
    assert TDESScorer.load(path, net.embed, beta=0.0).beta == 0.0
    with pytest.raises(GraftError, match="no TDES scorer"):
        TDESScorer.load(tmp_path / "missing", net.embed)
    with pytest.raises(GraftError, match="trained on a 100 x 24 embedding table"):
        TDESScorer.load(path, net.embed[:50])


def test_scorer_id_names_the_weights_and_enters_the_bench_setting(tmp_path):
    """A scorer retrained at the same path gets a new id, so its bench results get a new setting."""

    scorer, net = random_scorer(5, beta=0.2)
    path = tmp_path / "s.safetensors"
    scorer.save(path, net)
    first = scorer_id(path)
    assert len(first) == 12 and scorer_id(path) == first
    setting = MethodInputs(tdes=str(path)).setting(["ddtree+tdes"])
    assert setting["tdes_id"] == first and setting["beta"] == 0.2
    with torch.no_grad():
        net.s_raw += 0.5
    scorer.save(path, net)
    assert scorer_id(path) != first
    assert MethodInputs(tdes=str(path)).setting(["ddtree+tdes"])["tdes_id"] == scorer_id(path)
    assert "tdes_id" not in MethodInputs().setting(["ddtree"])


# ---------------------------------------------------------------- decoding with TDES

@pytest.fixture(scope="module")
def tiny_pair(one_thread):
    return tiny_target("llama", seed=0, initializer_range=0.1), tiny_drafter(seed=0)


def test_tdes_decoder_is_exact(tiny_pair):
    target, drafter = tiny_pair
    D = drafter.block_size - 1
    scorer, _ = random_scorer(0, beta=2.0, depths=D, vocab=32, scale=5.0)
    differ = 0
    for seed, n in ((0, 6), (1, 11)):
        prompt = random_prompt(seed, n)
        ar = Decoder.for_method(target, drafter, "ar").decode(prompt, 30).tokens
        for budget in (4, 16):
            dec = Decoder(target, drafter, scorer.builder(D), FixedBudget(budget), [])
            res = dec.decode(prompt, 30, record_trees=True)
            assert res.tokens == ar
            for r in res.rounds:
                assert r.nodes == budget
            dd = Decoder.for_method(target, drafter, "ddtree", budget).decode(prompt, 30, record_trees=True)
            differ += res.rounds[0].tree != dd.rounds[0].tree
    assert differ > 0  # the scorer changed some trees, so the check means something


def test_train_on_tiny_traces(tiny_pair):
    target, drafter = tiny_pair
    rounds = []
    for i, (seed, n) in enumerate(((0, 6), (1, 11), (2, 4))):
        rs, stats = collect_prompt(target, drafter, random_prompt(seed, n), 6, 16)
        assert stats["replay_disagree"] == 0
        for r in rs:
            r.prompt = i
        rounds += rs
    embed = target.get_input_embeddings().weight
    scorer, _, summary = train_tdes(rounds, embed, TDESConfig(epochs=2, val_fraction=0.34), log=lambda *_: None)
    assert scorer.depths == drafter.block_size - 1 and scorer.vocab == 32 and summary["rounds_val"] > 0
    assert all(math.isfinite(h["total"]) for h in summary["history"])


def test_methods_ddtree_tdes_and_graft_load_a_scorer_by_path(tiny_pair, tmp_path):
    target, drafter = tiny_pair
    D = drafter.block_size - 1
    torch.manual_seed(1)
    net = TDESNet(target.get_input_embeddings().weight, 8, D)  # over the target's own embeddings
    with torch.no_grad():
        net.u.normal_()
        net.s_raw.fill_(math.log(math.expm1(5.0)))
    scorer = TDESScorer.from_net(net, 2.0)
    path = scorer.save(tmp_path / "s.safetensors", net)
    prompt = random_prompt(3, 9)
    ar = Decoder.for_method(target, drafter, "ar").decode(prompt, 24).tokens
    by_hand = Decoder(target, drafter, scorer.builder(D), FixedBudget(8), []).decode(prompt, 24, record_trees=True)
    named = Decoder.for_method(target, drafter, "ddtree+tdes", 8, inputs=MethodInputs(tdes=str(path)))
    named = named.decode(prompt, 24, record_trees=True)
    assert named.tokens == ar and [r.tree for r in named.rounds] == [r.tree for r in by_hand.rounds]
    flat = Decoder.for_method(target, drafter, "ddtree+tdes", 8, inputs=MethodInputs(tdes=str(path), beta=0.0)).decode(
        prompt, 24, record_trees=True)
    dd = Decoder.for_method(target, drafter, "ddtree", 8).decode(prompt, 24, record_trees=True)
    assert [r.tree for r in flat.rounds] == [r.tree for r in dd.rounds]  # beta = 0 is DDTree
    saba = replace(default_params(), meta={})  # the shipped numbers, without the pair they belong to
    graft = Decoder.for_method(target, drafter, "graft", 32, inputs=MethodInputs(tdes=str(path),
                                                                                 saba=saba)).decode(prompt, 24)
    assert graft.tokens == ar and all(0 <= r.budget <= 32 for r in graft.rounds)  # 0: an AR-gate step
    with pytest.raises(GraftError, match="no TDES scorer at"):
        Decoder.for_method(target, drafter, "ddtree+tdes", 8,
                           inputs=MethodInputs(tdes=str(tmp_path / "missing.safetensors")))
    with pytest.raises(GraftError, match="beta must be in"):
        Decoder.for_method(target, drafter, "graft", 8, inputs=MethodInputs(tdes=str(path), beta=-1.0))


