"""AR-drafted trees (EAGLE-3 drafter; EAGLE-2's dynamic tree and OPT-Tree) in the decode loop.

- Exactness: `eagle3` and `opt-tree` emit greedy AR's tokens on tiny random Llama and Qwen3
  targets, at the releases' budgets, at a budget beyond EAGLE's candidate pool (the whole pool is
  verified) and at a small one, with EOS inside a tree (the embedded target: test_eagle3_embedded.py).
- The policies on hand-made probability tables (a fake drafter whose next-token law depends on
  the input token only): which nodes are forwarded at each depth, the tree masks, where OPT-Tree
  stops, which nodes the rerank keeps.
- The draft step against a drafter run from scratch: every pool log q equals the one of the
  node's path decoded as a plain chain, and in the decode loop the drafter cache holds exactly
  the committed positions with the K/V a fresh drafter computes from every committed pair; a
  fault (skipping the crop of the round's tree nodes) fails that check.
"""

import itertools
from dataclasses import replace

import pytest
import torch
from tiny import eagle3_config, exactness_eagle3, random_eagle3, tiny_drafter, tiny_pairs, write_eagle3_dir
from trees import validate

from graftlib.core.ar_drafting import ARDraftState, ARTreeDrafter, DraftPool
from graftlib.core.builders import FixedBudget
from graftlib.core.decode import SpecState
from graftlib.core.errors import GraftError
from graftlib.core.exactness import check_exact
from graftlib.core.tree import Tree
from graftlib.methods.decoder import Decoder, TreeDecoder, drafter_for
from graftlib.methods.eagle_tree import EagleTree
from graftlib.methods.opt_tree import OptTree
from graftlib.models.eagle3 import Eagle3Cache

MAX_NEW = 37
PROMPT_LENS = (1, 9, 23)
TOL = 1e-4
POOL = 10 + 7 * 10 * 10  # EAGLE's candidate pool at the release's depth 7 / top_k 10
RUNS = [("eagle3", 59), ("opt-tree", 50), ("opt-tree", 4)]  # the releases' budgets and a small one

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pairs():
    """Per architecture: (target, EAGLE-3 drafter, prompts, greedy AR outputs)."""
    out = {}
    for arch, (target, _, prompts, ar) in tiny_pairs(PROMPT_LENS, MAX_NEW).items():
        out[arch] = (target, exactness_eagle3(target, arch),
                     prompts, ar)
    return out


def check_round(r, method: str, budget: int):
    tree = Tree(r.tree["tokens"], r.tree["parents"], r.tree["depths"])
    validate(tree)
    policy = EagleTree() if method == "eagle3" else OptTree()
    assert 1 <= r.nodes == tree.num_nodes <= budget and tree.max_depth <= policy.max_depth
    if method == "eagle3":  # the rerank keeps min(budget, pool) nodes; the drafter always runs depth + 1 forwards
        assert r.nodes == min(budget, POOL) and len(r.t_draft_steps) == policy.depth + 1
    assert 1 <= len(r.t_draft_steps) <= policy.max_depth  # the context step, then one forward per expanded depth
    acc = r.accepted_nodes
    assert acc[0] == 0 and r.accepted == len(acc)
    for a, b in itertools.pairwise(acc):
        assert tree.parents[b] == a and r.target_next[a] == tree.tokens[b]
    last = acc[-1]
    assert all(tree.tokens[c] != r.target_next[last] for c in range(1, len(tree.tokens)) if tree.parents[c] == last)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("method,budget", RUNS, ids=[f"{m}@{b}" for m, b in RUNS])
def test_ar_drafted_equals_ar(pairs, arch, method, budget):
    target, drafter, prompts, ar = pairs[arch]
    dec = Decoder.for_method(target, drafter, method, budget)
    assert isinstance(dec, TreeDecoder)
    longest, noncontiguous = 0, 0
    for p, ref in zip(prompts, ar):
        res = dec.decode(p, MAX_NEW, record_trees=True)
        check_exact(target, p, ref, res.tokens, TOL)
        assert len(res.tokens) == MAX_NEW and res.stop == "length"
        for r in res.rounds:
            check_round(r, method, budget)
        longest = max([longest] + [r.accepted for r in res.rounds])
        noncontiguous += sum(r.accepted_nodes != list(range(r.accepted)) for r in res.rounds)
    if budget >= 50:  # multi-token acceptance and the cache compaction path are exercised
        assert longest >= 3 and noncontiguous > 0, (longest, noncontiguous)


@pytest.mark.parametrize("arch,method,budget", [("llama", "eagle3", 1024), ("qwen3", "eagle3", 4)])
def test_whole_pool_and_a_small_budget(pairs, arch, method, budget):
    """eagle3@1024 verifies EAGLE's whole pool (710 nodes) every round; eagle3@4 keeps 4 of it."""
    target, drafter, prompts, ar = pairs[arch]
    res = Decoder.for_method(target, drafter, method, budget).decode(prompts[1], MAX_NEW, record_trees=True)
    check_exact(target, prompts[1], ar[1], res.tokens, TOL)
    for r in res.rounds:
        check_round(r, method, budget)


def test_budget_beyond_a_small_pool(pairs):
    """EAGLE depth 2 / top_k 3: a pool of 3 + 2 x 9 = 21 nodes, all verified under budget 64."""
    target, drafter, prompts, ar = pairs["qwen3"]
    dec = TreeDecoder(target, drafter, EagleTree(depth=2, top_k=3), FixedBudget(64))
    res = dec.decode(prompts[2], MAX_NEW)
    check_exact(target, prompts[2], ar[2], res.tokens, TOL)
    assert {r.nodes for r in res.rounds} == {21}


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_eos_inside_tree(pairs, arch):
    target, drafter, prompts, ar = pairs[arch]
    for p, ref in zip(prompts, ar):
        spec = Decoder.for_method(target, drafter, "eagle3", 59).decode(p, MAX_NEW)
        pos, k = 1, -1
        for r in spec.rounds:  # a first-occurrence token that is not its round's last
            k = next((j for j in range(pos, pos + r.accepted - 1) if ref[j] not in ref[:j]), -1)
            if k >= 0:
                break
            pos += r.accepted
        if k >= 0:
            break
    assert k >= 0, "no prompt put a first-occurrence token inside a round"
    for method, budget in (("eagle3", 59), ("opt-tree", 50), ("eagle3", 4)):
        res = Decoder.for_method(target, drafter, method, budget, eos_ids=[ref[k]]).decode(p, MAX_NEW)
        assert res.tokens == ref[:k + 1] and res.stop == "eos", (method, budget, k)


class TableDrafter:
    """A fake AR drafter over 4 tokens: the next-token law depends on the input token only
    (row `token` of TABLE). Its hidden state is the one-hot input token; it records its calls."""

    TABLE = torch.tensor([[0.04, 0.60, 0.30, 0.06],
                          [0.10, 0.15, 0.05, 0.70],
                          [0.50, 0.35, 0.10, 0.05],
                          [0.40, 0.30, 0.20, 0.10]])

    def __init__(self):
        self.calls = []

    def context_features(self, hidden_states):
        return hidden_states[0]

    def new_cache(self):
        return Eagle3Cache()

    def __call__(self, input_ids, hidden, positions, cache, extra_mask=None):
        self.calls.append((input_ids[0].tolist(), positions.tolist(), extra_mask))
        n = len(positions)
        cache.k = torch.zeros(1, 1, cache.length + n, 1)  # only the length matters here
        cache.v = cache.k
        return torch.nn.functional.one_hot(input_ids, 4).float()

    def logits(self, hidden):
        return hidden @ self.TABLE.log()

    def target_ids(self, draft_ids):
        return draft_ids


def grow(policy, budget: int, drafter=None):
    """The draft step on the fake drafter: context pairs ending in root token 0 at position 5."""
    drafter = drafter or TableDrafter()
    state = ARDraftState(drafter.new_cache(), [2, 1, 0])
    st = SpecState(None, state, torch.zeros(1, 3, 4), 5, 0)
    pool = ARTreeDrafter(drafter, policy).grow(st, budget)
    assert state.kv.length == 3 and state.tokens == [] and st.features.shape[1] == 0  # the tree nodes are cropped
    return pool, drafter


def paths(pool: DraftPool, nodes: list[int]) -> list[tuple[int, ...]]:
    """Token paths (root excluded) of pool nodes."""
    out = []
    for i in nodes:
        path = []
        while i > 0:
            path.append(pool.tokens[i])
            i = pool.parents[i]
        out.append(tuple(reversed(path)))
    return out


def test_eagle_dynamic_tree_on_a_table():
    """depth 1, top_k 2: root 0 -> {1: .6, 2: .3}; both forwarded; 1 -> {3: .42, 1: .09}, 2 -> {0: .15, 1: .105}."""
    pool, drafter = grow(EagleTree(depth=1, top_k=2), 3)
    assert [c[0] for c in drafter.calls] == [[2, 1, 0], [1, 2]]  # context step, then depth 1
    assert drafter.calls[0][1] == [2, 3, 4] and drafter.calls[1][1] == [5, 5]  # positions start - 1 + depth
    assert torch.equal(drafter.calls[1][2], torch.eye(2, dtype=torch.bool))  # siblings do not see each other
    assert sorted(paths(pool, range(1, len(pool.tokens)))) == [(1,), (1, 1), (1, 3), (2,), (2, 0), (2, 1)]
    assert len(pool.step_times) == 2
    policy = EagleTree(depth=1, top_k=2)
    tree = policy.build(0, pool, 3)
    assert paths(pool, pool.best(3)) == [(1,), (2,), (1, 3)]
    assert (tree.tokens, tree.parents, tree.depths) == ([0, 1, 2, 3], [-1, 0, 0, 1], [0, 1, 1, 2])
    assert policy.build(0, pool, 5).num_nodes == 5 and policy.build(0, pool, 100).num_nodes == 6  # whole pool
    assert tree.scores[3] == pytest.approx(torch.tensor(0.42).log().item(), abs=1e-6)


def test_eagle_frontier_is_the_best_of_the_newest():
    """depth 2: of depth 2's four nodes the two best (1->3: .42, 2->0: .15) are forwarded, each seeing
    its own parent only; their children join the pool and the rerank takes 1->3->0 (.168) over 2->0."""
    pool, drafter = grow(EagleTree(depth=2, top_k=2), 4)
    ids, pos, mask = drafter.calls[2]
    assert ids == [3, 0] and pos == [6, 6]
    assert torch.equal(mask, torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1]], dtype=torch.bool))
    assert paths(pool, pool.best(4)) == [(1,), (2,), (1, 3), (1, 3, 0)]
    assert pool.size == 2 + 4 + 4


def test_opt_tree_stops_when_a_depth_gains_too_little():
    """nodes 3: E(depth 1) = .6 + .3 + .06 = .96; depth 2 raises the best 3-node tree to .6 + .42 + .3 = 1.32
    (gain .36); depth 3's best (.168) cannot enter it (gain 0)."""
    pool, drafter = grow(OptTree(threshold=0.1), 3)
    assert [c[0] for c in drafter.calls] == [[2, 1, 0], [1, 2, 3], [3, 0, 1]]  # layers: 3 best of each depth
    assert pool.mass(3, pool.forwarded) == pytest.approx(1.32)
    tree = OptTree(threshold=0.1).build(0, pool, 3)
    assert (tree.tokens, tree.parents, tree.depths) == ([0, 1, 2, 3], [-1, 0, 0, 1], [0, 1, 1, 2])
    assert len(grow(OptTree(threshold=0.4), 3)[1].calls) == 2  # gain .36 <= .4: depth 2 is not forwarded
    assert len(grow(OptTree(threshold=0.1, max_depth=2), 3)[1].calls) == 2
    assert len(grow(OptTree(threshold=0.99), 3)[1].calls) == 1  # depth 1 gains .96: nothing forwarded
    tree = OptTree(threshold=0.99).build(0, grow(OptTree(threshold=0.99), 3)[0], 3)
    assert tree.tokens == [0, 1, 2, 3] and tree.depths == [0, 1, 1, 1]


def test_rerank_keeps_ancestors_on_ties():
    """A child whose edge has q = 1 ties its parent's path log q: the parent is kept first."""
    pool = DraftPool.root(0)
    a = pool.add(1, 0, -0.5)
    pool.add(2, 0, -0.7)
    pool.add(3, a, -0.5)
    assert pool.best(1) == [a] and pool.best(2) == [a, 3]
    validate(pool.tree(pool.best(2)))
    with pytest.raises(GraftError, match="parent 1 is not kept"):
        pool.tree([3])


def test_pool_log_q_equals_each_path_decoded_as_a_chain(pairs):
    """Tree masks and positions: a node's children log q (from one tree forward per depth) equal
    those of a fresh drafter fed the context and the node's path one token at a time."""
    target, drafter, _, _ = pairs["llama"]
    g = torch.Generator().manual_seed(3)
    n, start = 6, 6
    feats = torch.randn(1, n, 3 * target.config.hidden_size, generator=g)
    tokens = torch.randint(0, 32, (n,), generator=g).tolist()
    st = SpecState(None, ARDraftState(drafter.new_cache(), list(tokens)), feats, start, tokens[-1])
    draft_id = {t: j for j, t in enumerate(drafter.target_ids(torch.arange(24)).tolist())}
    with torch.inference_mode():
        pool = ARTreeDrafter(drafter, EagleTree(depth=3, top_k=3)).grow(st, 20)
        assert st.draft_cache.kv.length == start and st.features.shape[1] == 0
        for node in pool.forwarded[::4]:
            chain = [node]
            while pool.parents[chain[-1]] > 0:
                chain.append(pool.parents[chain[-1]])
            cache = drafter.new_cache()
            h = drafter(torch.tensor([tokens]), feats, torch.arange(n), cache)[:, -1:]
            for d, i in enumerate(reversed(chain), start=1):
                h = drafter(torch.tensor([[pool.tokens[i]]]), h, torch.tensor([start - 1 + d]), cache)
            logq = torch.log_softmax(drafter.logits(h[0, 0]).float(), -1)
            kids = [c for c in range(len(pool.tokens)) if pool.parents[c] == node]
            assert len(kids) == 3
            for c in kids:
                assert pool.logq[c] == pytest.approx(pool.logq[node] + float(logq[draft_id[pool.tokens[c]]]), abs=TOL)


class ContextCheckingDecoder(TreeDecoder):
    """After every draft step: the drafter cache holds exactly the committed positions, with the K/V a
    fresh drafter computes from every committed pair (all target features so far, each with its next token)."""

    def start_state(self, result, cache, features, gen=None, prompt_ids=None, timer=None):
        st = super().start_state(result, cache, features, gen, prompt_ids, timer)
        self.seen_features, self.seen_tokens = features, list(st.draft_cache.tokens)
        return st

    def advance(self, result, st, step, max_new_tokens, stop_at_eos):
        self.seen_features = torch.cat([self.seen_features, step.features], dim=1)
        self.seen_tokens += step.new
        return super().advance(result, st, step, max_new_tokens, stop_at_eos)

    def draft(self, st, k):
        pool = super().draft(st, k)
        kv = st.draft_cache.kv
        assert kv.length == st.start == len(self.seen_tokens), (kv.length, st.start)
        fresh = self.drafter.model.new_cache()
        self.drafter.model(torch.tensor([self.seen_tokens]), self.seen_features, torch.arange(st.start), fresh)
        assert torch.allclose(fresh.k, kv.k, atol=TOL) and torch.allclose(fresh.v, kv.v, atol=TOL)
        return pool


@pytest.mark.parametrize("method,budget", [("eagle3", 16), ("opt-tree", 16)])
def test_drafter_cache_matches_a_fresh_drafter(pairs, method, budget):
    target, drafter, prompts, ar = pairs["llama"]
    policy, controller = EagleTree() if method == "eagle3" else OptTree(), FixedBudget(budget)
    res = ContextCheckingDecoder(target, drafter, policy, controller).decode(prompts[1], MAX_NEW)
    assert res.tokens == ar[1] and len(res.rounds) > 3


def test_a_skipped_crop_fails_the_cache_check(pairs, monkeypatch):
    """The fault: the round's tree nodes stay in the drafter cache. Exactness cannot see it (the
    target verifies every token); the cache check does."""
    target, drafter, prompts, ar = pairs["llama"]
    monkeypatch.setattr(Eagle3Cache, "crop", lambda self, n: None)
    with pytest.raises(AssertionError):
        ContextCheckingDecoder(target, drafter, EagleTree(), FixedBudget(16)).decode(prompts[1], MAX_NEW)
    assert Decoder.for_method(target, drafter, "eagle3", 16).decode(prompts[1], MAX_NEW).tokens == ar[1]


def test_wrong_drafter_and_missing_drafter_are_named(pairs, tmp_path, monkeypatch):
    from graftlib.models import Pair, pair

    target, _, _, _ = pairs["llama"]
    dflash = tiny_drafter()
    with pytest.raises(GraftError, match="autoregressive drafter"):
        Decoder.for_method(target, dflash, "eagle3", 8)
    monkeypatch.setattr(pair, "EMBEDDED_EAGLE3_DIR", tmp_path / "not-trained-yet")
    p = Pair(target, None, dflash, False, "smollm2-135m", "embedded")
    with pytest.raises(GraftError, match=r"no EAGLE-3 drafter for the embedded target.*graft train-eagle3"):
        drafter_for(p, "opt-tree")
    assert drafter_for(p, "ddtree") is dflash
    with pytest.raises(GraftError, match="pass --eagle3 PATH"):
        replace(p, target_name="/models/other").eagle3_drafter()
    with pytest.raises(GraftError, match="not a directory"):
        replace(p, eagle3_path=str(tmp_path / "none")).eagle3_drafter()


def test_bench_and_generate_run_ar_drafted_methods(pairs, tmp_path, capsys):
    """`graft bench` records the tree settings and the EAGLE-3 drafter; `graft generate --eagle3 PATH
    --stages` prints the draft step per drafter forward (context, depth 1..7), DDTree's without them."""
    from tiny import write_drafter_dir, write_target_dir

    from graftlib.cli import main
    from graftlib.lab.report.metrics import round_stages, stage_table
    from graftlib.lab.run.bench import BenchPrompt, BenchSpec, Run, run_bench
    from graftlib.models import load_pair

    tdir, ddir = write_target_dir(tmp_path / "target", "qwen3", seed=1), write_drafter_dir(tmp_path / "dflash")
    pair = load_pair(str(tdir), str(ddir), "cpu", eagle3=str(tmp_path / "e3"))
    write_eagle3_dir(tmp_path / "e3", random_eagle3(eagle3_config(pair.target.config), pair.target.config), embed=True)
    prompts = [BenchPrompt("custom", "p0", tuple(pair.prompt_ids("abc")))]
    runs = [Run("ar", None), Run("eagle3", 8), Run("opt-tree", 8)]
    recs = run_bench(pair, prompts, runs, tmp_path / "b.jsonl", BenchSpec(12, warmup=False), progress=False)
    by_key = {r["key"]: r for r in recs}
    assert by_key["eagle3@8"]["matches_ar"] and by_key["opt-tree@8"]["matches_ar"]
    assert by_key["eagle3@8"]["tree_setting"] == {"depth": 7, "top_k": 10, "total_tokens": 9}
    assert by_key["opt-tree@8"]["tree_setting"] == {"nodes": 8, "threshold": 0.5, "max_depth": 10}
    # the records keep each round's drafter forwards (EAGLE-2's tree: the context step + 7 depths), priced
    # per forward by the default profile's c_ar_draft
    assert {len(s) for s in by_key["eagle3@8"]["round_shapes"]} == {6}
    assert all(s[4] == 8 for s in by_key["eagle3@8"]["round_shapes"]) and by_key["eagle3@8"]["modeled_s"] > 0
    # ... and their seconds, for Table 1's stage breakdown (lab.stages): within the draft stage's time
    e3 = by_key["eagle3@8"]
    assert [len(s) for s in e3["draft_step_s"]] == [8] * e3["rounds"]
    assert 0 < sum(map(sum, e3["draft_step_s"])) <= e3["stage_s"]["draft"]
    stages = stage_table(recs, [("custom", "EAGLE-3", "eagle3@8"), ("custom", "OPT-Tree", "opt-tree@8")])
    assert stages[0]["forwards/round"] == 8 and stages[0]["context fwd ms"] > 0 and stages[0]["depth fwd ms"] > 0
    assert 1 <= stages[1]["forwards/round"] <= 11  # OPT-Tree stops deeper drafting by its threshold (max depth 10)
    assert "forwards/round" not in round_stages([by_key["ar"]])
    setting = by_key["ar"]["setting"]
    assert setting["ar_trees"]["eagle3"] == {"depth": 7, "top_k": 10, "name": "eagle3"}
    assert setting["eagle3_id"] == pair.eagle3_describe()["eagle3_id"] and "eagle3" in setting
    common = ["generate", "--target", str(tdir), "--drafter", str(ddir), "--eagle3", str(tmp_path / "e3"),
              "--prompt", "abc", "--max-new-tokens", "12", "--budget", "8", "--stages", "--device", "cpu"]
    assert main(common + ["--method", "eagle3", "--rounds"]) == 0
    out = capsys.readouterr().out
    assert "  context" in out and "  depth 7" in out and "  depth 8" not in out
    assert main(common + ["--method", "ddtree"]) == 0
    out = capsys.readouterr().out
    assert "verify" in out and "  context" not in out
    for method in ("eagle3", "ddtree"):  # --show-tree prints every round's tree, AR-drafted or DFlash, and its bonus
        assert main(common + ["--method", method, "--show-tree", "--temperature", "0.8"]) == 0
        out = capsys.readouterr().out
        rounds = int(out.split("rounds=")[1].split()[0])
        assert out.count("\nround ") == rounds and out.count("-> bonus") == rounds and "B=8 nodes=8" in out


def test_tables_run_the_releases_settings_or_say_why_not(pairs, tmp_path, monkeypatch):
    from graftlib.lab.run.ar_baselines import ar_baseline_runs
    from graftlib.models import Pair, pair

    target, drafter, _, _ = pairs["llama"]
    monkeypatch.setattr(pair, "EMBEDDED_EAGLE3_DIR", tmp_path / "not-trained-yet")
    p = Pair(target, None, tiny_drafter(), False, "smollm2-135m", "embedded")
    runs, why = ar_baseline_runs(p)
    assert runs == [] and why.startswith("not run: no EAGLE-3 drafter for the embedded target")
    runs, why = ar_baseline_runs(replace(p, _eagle3=drafter))
    assert [r.key for r in runs] == ["eagle3@59", "opt-tree@50"] and why is None


@pytest.mark.parametrize("method,budget", [("eagle3", 59), ("opt-tree", 50)])
def test_explore_draws_an_ar_drafted_round_alone(pairs, method, budget):
    """explore_rounds with an AR-drafted method: the decode with its trees kept (no candidates, states or
    oracle: its tree grows with its own drafter), and plot_round draws that tree beside a note."""
    import matplotlib

    matplotlib.use("Agg")
    from types import SimpleNamespace

    from graftlib.core.sampling import Sampling
    from graftlib.lab.run.explore import explore, plot_round

    target, eagle3, prompts, ar = pairs["llama"]
    pair = SimpleNamespace(target=target, eagle3_drafter=lambda: eagle3, eos_ids=[])
    ex = explore(pair, prompts[1], method, budget, max_new_tokens=MAX_NEW)
    check_exact(target, prompts[1], ar[1], ex.tokens, TOL)
    assert len(ex.rounds) == len(ex.starts) == len(ex.oracle)
    assert all(c is None for c in ex.candidates) and all(r.tree is not None for r in ex.rounds)
    fig = plot_round(ex, 0, str, None, None, 0, (method, "ddtree"))
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert any("grows its tree with its own drafter" in t for t in texts) and fig.axes[0].get_title().startswith(method)
    sampled = explore(pair, prompts[1], method, budget, max_new_tokens=MAX_NEW, sampling=Sampling(0.8, seed=3))
    assert len(sampled.tokens) == MAX_NEW and sampled.rounds
