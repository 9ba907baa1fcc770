"""`graft+pred` (`graftlib.methods.budget_predictor`): the shipped predictor chooses as the fitted one, a decode reads
the features a replay records, the heap is cut where the predictor says with SABA's gates kept, every decode equals
AR, and `graft fit-predictor` ships a fit of timed replays (and names what it cannot fit)."""

import json

import numpy as np
import pytest
import torch
from tiny import random_predictor, random_prompt, tiny_drafter, tiny_target

from graftlib.cli import main as graft
from graftlib.core.builders import Candidates, HeapTreeBuilder
from graftlib.core.errors import GraftError
from graftlib.lab.report import budget_policy as bp
from graftlib.lab.run.predictor_fit import fit_predictor, timed_lines
from graftlib.methods.budget_predictor import BudgetPredictor, PredictedBudget, features
from graftlib.methods.decoder import Decoder
from graftlib.methods.saba import SabaController
from graftlib.methods.saba_params import SabaParams, default_params
from graftlib.methods.tdes import TDESNet, TDESScorer
from graftlib.training.graft.replay import ReplayDecoder, ReplaySpec

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_NEW = 37
BUDGETS = [1, 2, 4, 8]
NO_GATE = SabaParams(phi=[0, 0, 0, 4.0], alpha=[0, 0, 0, 2.0], c=[0.05, 1e-3, 0.0], grid=BUDGETS, c_ar=None)
GATED = SabaParams(phi=[0, 0, 0, 4.0], alpha=[0, 0, 0, 2.0], c=[0.05, 1e-3, 0.0], grid=BUDGETS, c_ar=[1e-4, 0.0],
                   max_skip=2, post_gate=True, c_draft=0.01)  # AR steps far cheaper than a round: the gates fire
PRE_GATED = SabaParams(phi=[0, 0, 0, 4.0], alpha=[0, 0, 0, 2.0], c=[0.05, 1e-3, 0.0], grid=BUDGETS,
                       c_ar=[1e-4, 0.0], max_skip=2, post_gate=False)  # AR steps between drafted probes


def heap_of(vocab: int, depth: int, seed: int = 0) -> HeapTreeBuilder:
    """GRAFT's TDES-ranked heap from a random scorer."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = TDESNet(torch.randn(vocab, 16, generator=g), 4, depth)
    with torch.no_grad():
        net.u.normal_(generator=g)
    return TDESScorer.from_net(net, 1.0).builder(depth)


def synthetic_rounds(n: int, seed: int) -> bp.Rounds:
    """Rounds whose best budget follows the heap's mass at 2 (a mass near 1: the larger tree pays)."""
    rng = np.random.default_rng(seed)
    budgets = np.array([2, 4, 8])
    mass = np.cumsum(rng.uniform(0, 1.5, (n, 3)), axis=1)
    big = mass[:, 0] > 0.75
    tps = np.where(big[:, None], [1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) * rng.uniform(0.9, 1.1, (n, 1))
    state = np.column_stack([rng.uniform(0, 1, n), rng.uniform(0, 1, n), rng.uniform(1, 4, n), np.ones(n)])
    return bp.Rounds(budgets, tps, tps * 0.02, np.full(n, 4), state, rng.integers(50, 400, n).astype(float),
                     np.array([f"p{i % 8}" for i in range(n)]), rng.uniform(0, 1, (n, 4)), mass)


def test_the_shipped_form_chooses_as_the_fitted_predictor_and_survives_its_file(tmp_path):
    fitted = bp.Predictor("ridge", 10.0).fit(synthetic_rounds(160, seed=0))
    held = synthetic_rounds(80, seed=1)
    shipped = fitted.shipped({"source": "test"})
    want = fitted.choose(held)
    assert shipped.choose(held.features()).tolist() == want.tolist()
    best = held.retained(bp.fixed(held, bp.best_fixed(held))).mean()
    assert held.retained(want).mean() > max(0.9, best + 0.1)  # the mass decides the budget, and the fit learned it
    back = BudgetPredictor.load(shipped.save(tmp_path / "p.json"))
    assert back.id == shipped.id and back.choose(held.features()).tolist() == want.tolist()
    assert back.meta["source"] == "test" and back.meta["path"].endswith("p.json")
    assert set(back.choose(held.features(), cap=4).tolist()) <= {2, 4}  # a cap keeps the choice within it
    with pytest.raises(GraftError, match="within the cap 1"):
        back.choose(held.features(), cap=1)
    with pytest.raises(GraftError, match="only a fitted ridge"):
        bp.Predictor("knn", k=5).fit(synthetic_rounds(40, 2)).shipped({})


def test_bad_predictor_files_and_features_are_named(tmp_path):
    with pytest.raises(GraftError, match="not found"):
        BudgetPredictor.load(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(GraftError, match="not a predictor file"):
        BudgetPredictor.load(tmp_path / "bad.json")
    with pytest.raises(GraftError, match="disagree in shape"):
        BudgetPredictor([2, 4], [0.0], [1.0], [[0.0, 0.0]])
    with pytest.raises(GraftError, match="positive and increasing"):
        BudgetPredictor([4, 2], [0.0], [1.0], [[0.0, 0.0], [0.0, 0.0]])
    with pytest.raises(GraftError, match="drafter of another depth"):
        random_predictor(3, BUDGETS).choose(np.zeros((1, 5)))


def test_the_rule_cuts_its_heap_where_the_predictor_says_and_keeps_sabas_gates():
    """A predictor that prefers 4 cuts the heap's tree at its first 4 pops (the heap's own tree of 4); a cap of 2
    keeps it within 1 and 2; a calibration whose AR step is far cheaper than a round turns it into an AR step."""
    g = torch.Generator().manual_seed(5)
    cand = Candidates.from_logits(torch.randn(7, 32, generator=g) * 3.0, 64)
    heap = heap_of(32, 7)
    n = 14 + 2 * 7 + len(BUDGETS)
    w = np.zeros((n + 1, len(BUDGETS)))
    w[0] = [0.0, 1.0, 5.0, 2.0]  # the intercept: 4 best, then 8, then 2
    pred = BudgetPredictor(BUDGETS, [0.0] * n, [1.0] * n, w.tolist())
    rule = PredictedBudget(pred, heap, SabaController(NO_GATE, cap=64), cap=64)
    rule.reset()
    assert rule.budget(cand, 10) == 8 == rule.max_budget
    tree = rule.build(0, cand, 8)
    ref = heap.build(0, cand, 4)
    assert (tree.tokens, tree.parents, tree.num_nodes) == (ref.tokens, ref.parents, 4)
    capped = PredictedBudget(pred, heap, SabaController(NO_GATE, cap=2), cap=2)
    capped.reset()
    assert capped.budget(cand, 10) == 2 and capped.build(0, cand, 2).num_nodes == 2
    gated = PredictedBudget(pred, heap, SabaController(GATED, cap=64), cap=64)
    gated.reset()
    assert gated.budget(cand, 10) == 0
    with pytest.raises(GraftError, match="within the cap"):
        PredictedBudget(BudgetPredictor([4, 8], [0.0] * n, [1.0] * n, w[:, :2].tolist()), heap,
                        SabaController(NO_GATE), cap=2)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def pair(request):
    seed = {"llama": 0, "qwen3": 1}[request.param]
    return tiny_target(request.param, seed=seed, initializer_range=0.1), tiny_drafter(seed=seed)


@pytest.fixture(scope="module")
def predictor(pair):
    """A random predictor standardized by the pair's replayed rounds: its choices vary from round to round."""
    target, drafter = pair
    return random_predictor(drafter.block_size - 1, BUDGETS, seed=3, rounds=bp.rounds(_lines(target, drafter, 2)))


def _rule(target, drafter, predictor, params):
    return PredictedBudget(predictor, heap_of(target.config.vocab_size, drafter.block_size - 1),
                           SabaController(params, cap=64), cap=64)


def _listening(feedback, heard: list):
    """`feedback` that also notes each round's budget in `heard`."""
    def hook(record):
        heard.append(record["budget"])
        feedback(record)
    return hook


@pytest.mark.parametrize("params", [NO_GATE, PRE_GATED, GATED], ids=["no-gate", "pre-gated", "gated"])
def test_a_decode_equals_ar_and_chooses_what_the_replay_s_features_say(pair, predictor, params):
    """The decode's tokens are AR's with and without the gates' AR steps; replayed, every drafted round's tree has
    the size the predictor gives on the features and state the replay recorded for it: a fit on replays reads
    what the decode reads."""
    target, drafter = pair
    ar = Decoder.for_method(target, drafter, "ar")
    replay_rounds, sizes = 0, set()
    for p in (random_prompt(7, 11), random_prompt(19, 12)):
        ref = ar.decode(p, MAX_NEW).tokens
        rule = _rule(target, drafter, predictor, params)
        heard = []
        rule.gate.feedback = _listening(rule.gate.feedback, heard)
        res = Decoder(target, drafter, rule, rule).decode(p, MAX_NEW)
        assert res.tokens == ref
        assert heard == [r.budget for r in res.rounds]  # builder and controller at once: each round heard once
        assert bool([r for r in res.rounds if r.budget == 0]) == (params is not NO_GATE) or len(res.rounds) < 2
        rule = _rule(target, drafter, predictor, params)
        spec = ReplaySpec(tuple(BUDGETS), window=params.window, hist_prior=params.hist_prior)
        out = ReplayDecoder(target, drafter, rule, rule, spec).replay(p, MAX_NEW)
        assert out.decode.tokens == ref
        assert [r.nodes for r in out.decode.rounds] == [r.nodes for r in res.rounds]  # the same choices
        for r in (r for r in out.records if r.reference and r.budget > 0):
            f = r.features
            x = features(np.array([r.state]), np.array([float(r.prefix_len)]), np.array([f["q1"] + f["qk"]]),
                         np.array([f["mass"]]))
            assert r.nodes == rule.predictor.choose(x)[0]
            replay_rounds += 1
            sizes.add(r.nodes)
    assert replay_rounds >= (0 if params is GATED else 4)  # the post-draft gate declines every drafted round
    assert len(sizes) >= (0 if params is GATED else 2)  # the predictor's choice varies: the check can fail


def _lines(target, drafter, n_prompts: int, setting_id: str = "s1") -> list[dict]:
    """Replay JSON lines of GRAFT's heap under SABA on `n_prompts` prompts, as `replay_prompts` writes them."""
    lines = []
    for i in range(n_prompts):
        ctl = SabaController(NO_GATE, cap=8)
        spec = ReplaySpec(tuple(BUDGETS), window=NO_GATE.window, hist_prior=NO_GATE.hist_prior)
        res = ReplayDecoder(target, drafter, heap_of(target.config.vocab_size, drafter.block_size - 1), ctl,
                            spec).replay(random_prompt(5 + i, 9), 24)
        lines.append({"setting_id": setting_id, "setting": {"saba_calibration": "graftlib/assets/saba/default.json"},
                      "grid": BUDGETS, "uid": f"p{i}", "records": [r.to_dict() for r in res.records]})
    return lines


def test_fit_predictor_ships_a_fit_of_timed_replays_and_names_what_it_cannot_fit(pair, tmp_path, capsys):
    target, drafter = pair
    lines = _lines(target, drafter, 4)
    pred = fit_predictor(timed_lines(lines, BUDGETS))
    assert pred.budgets == BUDGETS and len(pred.mu) == 14 + 2 * (drafter.block_size - 1) + len(BUDGETS)
    assert pred.meta["pair"] == default_params().meta["pair"] and pred.meta["prompts"] == 4
    R = bp.rounds(lines)
    want = bp.Predictor("ridge", float(pred.meta["fitted"].split("=")[1].rstrip(")"))).fit(R).choose(R)
    assert pred.choose(R.features()).tolist() == want.tolist()
    walked = [dict(x, setting={**x["setting"], "cost_profile": "paper-a100"}) for x in lines]
    with pytest.raises(GraftError, match="0 timed replay settings"):
        timed_lines(walked, BUDGETS)
    path = tmp_path / "replays.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "pred.json"
    assert graft(["fit-predictor", "--replays", str(path), "--grid", "1,2,4,8", "--out", str(out)]) == 0
    assert BudgetPredictor.load(out).id == pred.id and "fit-predictor" in BudgetPredictor.load(out).meta["command"]
    two = tmp_path / "two.jsonl"
    two.write_text("".join(json.dumps(x) + "\n" for x in lines + [dict(lines[0], setting_id="s2")]))
    assert graft(["fit-predictor", "--replays", str(two), "--grid", "1,2,4,8", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 timed replay settings" in err[0] and not (tmp_path / "x.json").exists()
