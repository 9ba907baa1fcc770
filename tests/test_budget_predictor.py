"""`graft+pred` (`graftlib.methods.budget_predictor`): the shipped predictor chooses as the fitted one, a decode reads
the features a replay records, the heap is cut where the predictor says, the AR step is an arm learned before the
draft (in place of SABA's gates), every decode equals AR, `graft fit-predictor` ships a fit of timed replays (and
names what it cannot fit), and a predictor of another machine is refused with the command that fits one here."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from tiny import random_predictor, random_prompt, tiny_drafter, tiny_target

from graftlib.cli import main as graft
from graftlib.core.builders import Candidates, HeapTreeBuilder
from graftlib.core.errors import GraftError
from graftlib.lab.report import budget_policy as bp
from graftlib.lab.run.predictor_fit import fit_predictor, timed_lines
from graftlib.methods.budget_predictor import BudgetPredictor, PredictedBudget, before_draft, features
from graftlib.methods.decoder import Decoder
from graftlib.methods.saba import SabaController
from graftlib.methods.saba_params import SabaParams, default_params
from graftlib.methods.tdes import TDESNet, TDESScorer
from graftlib.training.graft.replay import ReplayDecoder, ReplaySpec

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_NEW = 37
BUDGETS = [1, 2, 4, 8]
NO_GATE = SabaParams(phi=[0, 0, 0, 4.0], alpha=[0, 0, 0, 2.0], c=[0.05, 1e-3, 0.0], grid=BUDGETS, c_ar=None)


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


def rounds_with_ar(n: int, seed: int) -> bp.Rounds:
    """`synthetic_rounds` with budget 0, whose throughput falls with hist_t (log-linear: 3 tokens / s at 2, the best
    tree's): the AR step wins where hist_t is below about 2."""
    R = synthetic_rounds(n, seed)
    rng = np.random.default_rng(seed + 100)
    ar_tps = 3.0 * np.exp(2.5 * (2.0 - R.state[:, 2])) * rng.uniform(0.95, 1.05, n)
    last = np.column_stack([rng.uniform(0, 1, (n, 2)), R.state[:, 2:]])  # any conf, degen; hist as now
    last[::10] = np.nan  # a prompt's first rounds
    return bp.Rounds(np.array([0, 2, 4, 8]), np.column_stack([ar_tps, R.tps]), np.column_stack([np.ones(n),
                     R.accepted]), R.reference, R.state, R.prefix, R.prompt, R.extra,
                     np.column_stack([np.zeros(n), R.mass]), last)


def test_the_ar_arm_is_learned_where_the_ar_step_wins_and_ships_as_fitted(tmp_path):
    """Fitted on rounds whose AR step wins at a low hist_t, the arm takes it there (never in a prompt's first round),
    retains more than the tree alone, and the shipped file decides as the fit does."""
    fitted = bp.Predictor("ridge", 1.0).fit(rounds_with_ar(400, seed=0))
    held = rounds_with_ar(200, seed=1)
    choice = fitted.choose(held)
    first = np.isnan(held.last[:, 0])
    assert not (choice[first] == 0).any()
    tree = fitted.choose_tree(held)
    wins = held.tps[:, 0] > held.tps[np.arange(len(held)), np.searchsorted(held.budgets, tree)]
    assert 0.2 < wins[~first].mean() < 0.8  # both arms win somewhere: the check can fail
    assert ((choice == 0) == wins)[~first].mean() > 0.9
    assert held.retained(choice).mean() > held.retained(tree).mean() + 0.1
    back = BudgetPredictor.load(fitted.shipped({"source": "test"}).save(tmp_path / "p.json"))
    assert back.ar is not None and back.budgets == [2, 4, 8]
    x0 = before_draft(held.last[~first], held.state[~first, 2], held.prefix[~first])
    assert ((back.ar_ratio(x0) > 0) == (choice[~first] == 0)).all()
    assert fitted.shipped({}).id != bp.Predictor("ridge", 1.0).fit(synthetic_rounds(400, seed=0)).shipped({}).id


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


def test_the_rule_cuts_its_heap_where_the_predictor_says_and_its_ar_arm_runs_ar_steps_between_probes():
    """A predictor that prefers 4 cuts the heap's tree at its first 4 pops (the heap's own tree of 4); a cap of 2
    keeps it within 1 and 2; an AR arm that always wins makes every round after the first draft an AR step but the
    probes (at doubling intervals up to max_skip), and one that never wins none."""
    g = torch.Generator().manual_seed(5)
    cand = Candidates.from_logits(torch.randn(7, 32, generator=g) * 3.0, 64)
    heap = heap_of(32, 7)
    n = 14 + 2 * 7 + len(BUDGETS)
    w = np.zeros((n + 1, len(BUDGETS)))
    w[0] = [0.0, 1.0, 5.0, 2.0]  # the intercept: 4 best, then 8, then 2
    pred = BudgetPredictor(BUDGETS, [0.0] * n, [1.0] * n, w.tolist())
    rule = PredictedBudget(pred, heap, NO_GATE, cap=64)
    assert rule.speculate(10) and rule.budget(cand, 10) == 8 == rule.max_budget
    tree = rule.build(0, cand, 8)
    ref = heap.build(0, cand, 4)
    assert (tree.tokens, tree.parents, tree.num_nodes) == (ref.tokens, ref.parents, 4)
    assert rule.speculate(12)  # no AR arm: every round drafts
    capped = PredictedBudget(pred, heap, NO_GATE, cap=2)
    assert capped.budget(cand, 10) == 2 and capped.build(0, cand, 2).num_nodes == 2
    for bias, want in ((1.0, [False, True, False, False, True, False, False, False, False, True]), (-1.0, [True] * 10)):
        arm = {"mu": [0.0] * 14, "sd": [1.0] * 14, "w": [bias] + [0.0] * 14}
        armed = PredictedBudget(BudgetPredictor(BUDGETS, [0.0] * n, [1.0] * n, w.tolist(), ar=arm), heap,
                                replace(NO_GATE, max_skip=4), cap=64)
        assert armed.speculate(5)  # never an AR step before a first draft
        armed.budget(cand, 5)
        got = []
        for t in range(10):
            go = armed.speculate(6 + t)
            if go:
                armed.budget(cand, 6 + t)
            armed.feedback({"budget": 8 if go else 0, "accepted": 2})
            got.append(go)
        assert got == want, (bias, got)
    with pytest.raises(GraftError, match="within the cap"):
        PredictedBudget(BudgetPredictor([4, 8], [0.0] * n, [1.0] * n, w[:, :2].tolist()), heap, NO_GATE, cap=2)


def test_a_predictor_of_another_machine_is_refused_with_the_command_that_fits_one_here():
    from graftlib.methods.budget_predictor import DEFAULT_PREDICTOR, FIT_COMMAND
    from graftlib.methods.fitted import check_predictor
    from graftlib.models.pair import PairId

    pred = BudgetPredictor.load(DEFAULT_PREDICTOR)
    pair = PairId.from_dict(pred.meta["pair"], "test")
    check_predictor(pred, pair, pred.meta["hardware"])  # its own machine: taken
    with pytest.raises(GraftError) as e:
        check_predictor(pred, pair, "cuda:NVIDIA H200")
    msg = str(e.value)
    assert "\n" not in msg and pred.meta["hardware"] in msg and "cuda:NVIDIA H200" in msg and FIT_COMMAND in msg
    assert "--replay-prompts 10" in msg and "min" in msg
    other = PairId.from_dict({**pred.meta["pair"], "drafter_fingerprint": "000000000000"}, "test")
    with pytest.raises(GraftError, match="not for this pair"):
        check_predictor(pred, other, pred.meta["hardware"])


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def pair(request):
    seed = {"llama": 0, "qwen3": 1}[request.param]
    return tiny_target(request.param, seed=seed, initializer_range=0.1), tiny_drafter(seed=seed)


@pytest.fixture(scope="module")
def predictor(pair):
    """A random predictor standardized by the pair's replayed rounds: its choices vary from round to round."""
    target, drafter = pair
    return random_predictor(drafter.block_size - 1, BUDGETS, seed=3, rounds=bp.rounds(_lines(target, drafter, 2)))


def _rule(target, drafter, predictor, params=NO_GATE):
    return PredictedBudget(predictor, heap_of(target.config.vocab_size, drafter.block_size - 1), params, cap=64)


def _listening(feedback, heard: list):
    """`feedback` that also notes each round's budget in `heard`."""
    def hook(record):
        heard.append(record["budget"])
        feedback(record)
    return hook


@pytest.mark.parametrize("arm", [None, 0.0, 5.0], ids=["no-arm", "learned-arm", "arm-always"])
def test_a_decode_equals_ar_and_chooses_what_the_replay_s_features_say(pair, predictor, arm):
    """The decode's tokens are AR's with and without the AR arm's steps; replayed, every drafted round's tree has
    the size the predictor gives on the features and state the replay recorded for it: a fit on replays reads
    what the decode reads."""
    target, drafter = pair
    ar = Decoder.for_method(target, drafter, "ar")
    if arm is not None:  # the same tree weights, with an AR arm of random weights and intercept `arm`
        armed = random_predictor(drafter.block_size - 1, BUDGETS, seed=3, ar_bias=arm,
                                 rounds=bp.rounds(_lines(target, drafter, 2)))
        predictor = replace(predictor, ar=armed.ar)
    replay_rounds, sizes, ar_steps = 0, set(), 0
    for p in (random_prompt(7, 11), random_prompt(19, 12)):
        ref = ar.decode(p, MAX_NEW).tokens
        rule = _rule(target, drafter, predictor)
        heard = []
        rule.feedback = _listening(rule.feedback, heard)
        res = Decoder(target, drafter, rule, rule).decode(p, MAX_NEW)
        assert res.tokens == ref
        assert heard == [r.budget for r in res.rounds]  # builder and controller at once: each round heard once
        ar_steps += sum(r.budget == 0 for r in res.rounds)
        rule = _rule(target, drafter, predictor)
        spec = ReplaySpec(tuple(BUDGETS), window=NO_GATE.window, hist_prior=NO_GATE.hist_prior)
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
    assert replay_rounds >= 4 and len(sizes) >= 2  # the predictor's choice varies: the check can fail
    assert (ar_steps > 0) == (arm is not None and arm > 0) or arm == 0.0  # a learned arm may or may not fire


def _lines(target, drafter, n_prompts: int, setting_id: str = "s1", grid=tuple(BUDGETS)) -> list[dict]:
    """Replay JSON lines of GRAFT's heap under SABA on `n_prompts` prompts, as `replay_prompts` writes them."""
    lines = []
    for i in range(n_prompts):
        ctl = SabaController(NO_GATE, cap=8)
        spec = ReplaySpec(tuple(grid), window=NO_GATE.window, hist_prior=NO_GATE.hist_prior)
        res = ReplayDecoder(target, drafter, heap_of(target.config.vocab_size, drafter.block_size - 1), ctl,
                            spec).replay(random_prompt(5 + i, 9), 24)
        lines.append({"setting_id": setting_id, "setting": {"saba_calibration": "graftlib/assets/saba/default.json"},
                      "grid": list(grid), "uid": f"p{i}", "records": [r.to_dict() for r in res.records]})
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


def test_fit_predictor_learns_the_ar_arm_from_replays_with_budget_0(pair, tmp_path):
    target, drafter = pair
    grid = [0, *BUDGETS]
    lines = _lines(target, drafter, 4, grid=grid)
    path = tmp_path / "replays.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "pred.json"
    assert graft(["fit-predictor", "--replays", str(path), "--grid", "0,1,2,4,8", "--out", str(out)]) == 0
    pred = BudgetPredictor.load(out)
    assert pred.budgets == BUDGETS and pred.ar is not None and len(pred.ar["w"]) == 15
    R = bp.rounds(lines)
    alpha = float(pred.meta["fitted"].split("=")[1].rstrip(")"))
    want = bp.Predictor("ridge", alpha).fit(R).choose(R)
    rows = ~np.isnan(R.last[:, 0])
    x0 = before_draft(R.last[rows], R.state[rows, 2], R.prefix[rows])
    assert ((pred.ar_ratio(x0) > 0) == (want[rows] == 0)).all()
    assert graft(["fit-predictor", "--replays", str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2
