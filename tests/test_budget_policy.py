"""`graftlib.lab.report.budget_policy`: policies against the same-prefix oracle, on hand-made rounds."""

import numpy as np
import pytest

from graftlib.core.errors import GraftError
from graftlib.lab.report import budget_policy as bp
from graftlib.methods.saba_params import SabaParams


def _rounds(n=200, seed=0, informative=True):
    """Rounds whose best budget is 4 when conf_t > 0.5 and 32 otherwise (informative), or a coin (not)."""
    rng = np.random.default_rng(seed)
    budgets = np.array([0, 4, 8, 16, 32])
    conf = rng.uniform(0, 1, n)
    easy = conf > 0.5 if informative else rng.uniform(0, 1, n) > 0.5
    tps = np.where(easy[:, None], [1.0, 3.0, 2.5, 2.0, 1.5], [1.0, 1.5, 2.0, 2.5, 3.0]) * rng.uniform(0.9, 1.1, (n, 1))
    state = np.column_stack([conf, rng.uniform(0, 1, n), rng.uniform(1, 4, n), np.ones(n)])
    return bp.Rounds(budgets, tps, tps * 0.02, np.full(n, 8), state, rng.integers(100, 400, n).astype(float),
                     np.array([f"p{i % 20}" for i in range(n)]))


def test_the_oracle_retains_everything_and_a_fixed_budget_its_share():
    R = _rounds()
    assert np.allclose(R.retained(bp.oracle(R)), 1.0)
    easy = R.state[:, 0] > 0.5
    assert np.allclose(R.retained(bp.fixed(R, 4))[easy], 1.0) and np.allclose(R.retained(bp.fixed(R, 4))[~easy], 0.5)
    assert bp.best_fixed(R) in (4, 32) and bp.best_fixed(R, among=[8, 16]) in (8, 16)
    with pytest.raises(GraftError, match="outside the replay's grid"):
        R.retained(bp.fixed(R, 12))


def test_a_predictor_learns_what_the_state_says_and_nothing_when_it_says_nothing():
    """Held out (fitted on other rounds), a predictor retains nearly all of the oracle where conf_t decides the
    best budget, and no more than the best fixed budget where a coin does."""
    for kind in ("ridge", "knn"):
        p = bp.Predictor(kind, alpha=1.0, k=15).fit(_rounds(seed=1))
        R = _rounds(seed=2)
        assert R.retained(p.choose(R)).mean() > 0.95
        coin = _rounds(seed=3, informative=False)
        p = bp.Predictor(kind, alpha=1.0, k=15).fit(_rounds(seed=4, informative=False))
        assert coin.retained(p.choose(coin)).mean() < coin.retained(bp.fixed(coin, bp.best_fixed(coin))).mean() + 0.03


def test_cross_validation_picks_the_candidate_that_generalizes():
    R = _rounds(seed=5)
    best, scores = bp.cross_validated(R, [bp.Predictor("knn", k=1), bp.Predictor("ridge", alpha=1.0)])
    assert set(scores) == {"knn(k=1)", "ridge(alpha=1)"} and all(0 < s <= 1 for s in scores.values())
    assert best.name == max(scores, key=scores.get)


def test_the_loss_decomposition_sums_to_saba_s_loss_and_names_each_cause():
    R = _rounds(seed=6)
    params = SabaParams(grid=[4, 8, 16])  # 32 left out of SABA's grid: the grid has a share
    parts = bp.decompose(R, params, depth=15)
    assert parts["total"] == pytest.approx(1 - R.retained(R.reference).mean())
    causes = ["gate and online correction", "gain model G_t(B)", "cost model C_t(B)", "budget grid"]
    assert list(parts)[1:] == causes and sum(parts[c] for c in causes) == pytest.approx(parts["total"])
    assert parts["budget grid"] > 0.05  # the hard rounds' best, 32, is outside SABA's grid


def test_against_best_fixed_pools_over_rounds_with_an_interval_over_prompts():
    R = _rounds(seed=7)
    best = bp.best_fixed(R)
    same = bp.against_best_fixed(R, bp.fixed(R, best), best)
    assert same["vs_best_fixed"] == pytest.approx(1.0) and same["ci"] == pytest.approx((1.0, 1.0))
    top = bp.against_best_fixed(R, bp.oracle(R), best)
    assert top["vs_best_fixed"] > 1.2 and top["ci"][0] > 1.0 and top["prompts"] == 20 and top["rounds"] == len(R)


def test_rounds_read_replay_lines_priced_by_a_profile():
    from graftlib.inputs.cost_profile import PAPER_PROFILE, CostProfile

    def rec(rnd, budget, accepted, reference=False):
        return dict(round=rnd, budget=budget, nodes=budget, accepted=accepted, prefix_len=100 + rnd, t_draft=0.0,
                    t_tree=0.0, t_verify=0.0, t_commit=0.0, tokens=[], state=[0.5, 1.0, 2.0, 1.0],
                    reference_budget=8, reference=reference)

    lines = [{"uid": "gsm8k/1", "records": [rec(t, b, a) for t in range(3) for b, a in ((0, 1), (4, 3), (8, 4))]
              + [rec(t, 8, 4, True) for t in range(3)]}]
    R = bp.rounds(lines, CostProfile.load(PAPER_PROFILE))
    assert list(R.budgets) == [0, 4, 8] and len(R) == 3 and list(R.reference) == [8, 8, 8]
    assert np.all(R.tps > 0) and list(R.prompt) == ["gsm8k/1"] * 3 and list(R.prefix) == [100, 101, 102]
    assert R.extra is None and R.features().shape == (3, 14)  # s_t's three, log prefix and their 10 products
    for r in lines[0]["records"]:  # the replay's round features, on its reference records
        if r["reference"]:
            r["features"] = {"q1": [0.9, 0.5], "qk": [0.99, 0.8], "mass": [0.0, 1.2, 1.5]}
    R = bp.rounds(lines, CostProfile.load(PAPER_PROFILE))
    assert R.extra.shape == (3, 4) and R.mass.shape == (3, 3) and R.features().shape == (3, 21)
    assert R.extra[0].tolist() == pytest.approx([0.9, 0.5, 0.99, 0.8]) and R.mass[0].tolist() == [0.0, 1.2, 1.5]
    assert bp.on_budgets(R, [0, 8]).mass[0].tolist() == [0.0, 1.5]  # the mass follows its budgets
    with pytest.raises(GraftError, match="no replayed rounds"):
        bp.rounds([])


def test_the_forecast_policy_stops_where_the_heap_s_own_forecast_per_cost_peaks():
    """(1 + mass_t(B)) / C_t(B) over SABA's grid: a round whose heap forecasts nothing past 4 nodes stops at 4, one
    whose forecast keeps growing goes on; without recorded masses the policy says what it needs."""
    R = _rounds(n=2)
    with pytest.raises(GraftError, match="heap's mass"):
        bp.forecast(R, SabaParams(grid=[4, 8, 16, 32]))
    mass = np.array([[0.0, 2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 3.0, 7.0, 15.0]])
    R = bp.Rounds(R.budgets, R.tps, R.accepted, R.reference, R.state, R.prefix, R.prompt, np.zeros((2, 2)), mass)
    params = SabaParams(grid=[4, 8, 16, 32], c=[0.01, 0.0001, 0.0])  # a node costs 1% of a round
    assert bp.forecast(R, params).tolist() == [4, 32]


def test_same_prefix_throughput_is_tokens_over_time_along_the_trajectory():
    R = _rounds(n=40, seed=8)
    choice = bp.fixed(R, 8)
    col = 2  # budget 8
    want = R.accepted[:, col].sum() / (R.accepted[:, col] / R.tps[:, col]).sum()
    assert bp.same_prefix_tps(R, choice) == pytest.approx(want)
    assert bp.same_prefix_tps(R, bp.oracle(R)) >= max(bp.same_prefix_tps(R, bp.fixed(R, b)) for b in (4, 8, 16,
                                                                                                      32)) - 1e-9
    p = R.prompt[0]
    rows = R.prompt == p
    assert bp.same_prefix_tps(R, choice, p) == pytest.approx(R.accepted[rows, col].sum()
                                                             / (R.accepted[rows, col] / R.tps[rows, col]).sum())


def test_throughput_weighs_rounds_by_their_time_and_its_best_fixed_budget_may_differ():
    """Two prompts of two rounds each at budgets 4 and 8: a short round where 4 wins, a long one where 8 wins.
    Retained share (per round) prefers 4; throughput (tokens over seconds) prefers 8, and the ratio and its
    interval are computed from those sums; a policy equal to its base is 1.0 with an interval of 1.0."""
    budgets = np.array([4, 8])
    acc = np.tile([[2.0, 2.0], [4.0, 8.0]], (4, 1))  # a short round (a = 2 both) and a long one
    secs = np.tile([[0.1, 0.2], [1.0, 1.6]], (4, 1))  # 4: 20 vs 10 tok/s; long: 4 vs 5 tok/s
    R = bp.Rounds(budgets, acc / secs, acc, np.full(8, 4), np.ones((8, 4)), np.full(8, 100.0),
                  np.array(["a", "a", "b", "b", "c", "c", "d", "d"]))
    assert bp.best_fixed(R) == 4 and bp.best_fixed_tps(R) == 8
    ratio, ci = bp.tps_against(R, bp.oracle(R), bp.fixed(R, 8))
    assert ratio == pytest.approx((10 / 1.7) / (10 / 1.8))  # the oracle: 4 in the short round, 8 in the long
    assert ci[0] == pytest.approx(ratio) and ci[1] == pytest.approx(ratio)  # every prompt alike: no spread
    assert bp.tps_against(R, bp.fixed(R, 8), bp.fixed(R, 8)) == (pytest.approx(1.0), (pytest.approx(1.0),
                                                                                     pytest.approx(1.0)))
    assert bp.tps_against(bp.Rounds(**{**R.__dict__, "prompt": np.array(["a"] * 4 + ["b"] * 4)}),
                          bp.oracle(R), bp.fixed(R, 8))[1] is None  # two prompts: no interval


def test_the_policy_table_fits_on_validation_and_scores_held_out_rounds():
    """One row per policy; the oracle on top, the best fixed budget at 1.0 with the B it names; where the state
    decides the best budget, the validation-fitted predictor beats the best fixed budget held out, where a coin
    does it cannot; a grid whose best is its edge says so."""
    params = SabaParams(grid=[4, 8, 16, 32])
    rows = {r["kind"]: r for r in bp.policy_rows(_rounds(seed=9), _rounds(seed=10), params, depth=15)}
    assert list(rows) == ["oracle", "best_fixed", "best_fixed_val", "saba", "saba_model", "predictor"]  # no mass
    assert rows["oracle"]["retained_oracle"] == pytest.approx(1.0) and rows["oracle"]["vs_best_fixed"] > 1.2
    assert rows["best_fixed"]["vs_best_fixed"] == pytest.approx(1.0)
    assert rows["best_fixed"]["best_fixed_B"] in (4, 32) and rows["best_fixed"]["best_fixed_at_edge"]
    assert rows["predictor"]["vs_best_fixed"] > 1.2 and rows["predictor"]["ci_low"] > 1.0
    assert rows["predictor"]["tps_vs_best_fixed"] > 1.1 and rows["predictor"]["tps_ci_low"] > 1.0
    base = rows["best_fixed"]["best_fixed_tps_B"]
    assert base == bp.best_fixed_tps(_rounds(seed=10)) and rows["oracle"]["tps_vs_best_fixed"] > 1.1
    assert all(r["prompts"] == 20 and r["validation_prompts"] == 20 for r in rows.values())
    coin = {r["kind"]: r for r in bp.policy_rows(_rounds(seed=11, informative=False),
                                                 _rounds(seed=12, informative=False), params, depth=15)}
    assert coin["predictor"]["vs_best_fixed"] < 1.03
    mass = _rounds(seed=13)
    mass = bp.Rounds(**{**mass.__dict__, "mass": np.tile([0.0, 1.0, 1.5, 1.8, 2.0], (len(mass), 1))})
    with_stop = [r["kind"] for r in bp.policy_rows(mass, mass, params, depth=15)]
    assert with_stop[-1] == "stop"


def _bench(uid, key, wall, modeled, new=40):
    method, _, budget = key.partition("@")
    return {"uid": uid, "key": key, "method": method, "budget": int(budget) if budget else None, "new_tokens": new,
            "decode_s": wall, "modeled_s": modeled, "rounds": 10, "accepted_sum": 20, "nodes_sum": 40,
            "matches_ar": True, "stage_s": {"draft": 0.0, "tree": 0.0, "verify": 0.0, "commit": 0.0}}


def test_timed_rows_divide_each_policy_by_the_fastest_fixed_budget_after_the_fact():
    # per prompt: AR 2 s; fixed budgets 4 / 8 / 16 at 1.0 / 0.8 / 1.2 s (8 fastest, inside its grid) by wall clock,
    # 16 fastest by the modeled figure (at its grid's edge); the policy 0.9 s wall, 0.5 s modeled
    recs = [r for i in range(4) for r in (
        _bench(f"p{i}", "ar", 2.0, 2.0), _bench(f"p{i}", "ddtree@4", 1.0, 1.0), _bench(f"p{i}", "ddtree@8", 0.8, 0.9),
        _bench(f"p{i}", "ddtree@16", 1.2, 0.6), _bench(f"p{i}", "graft+stop@64", 0.9 + 0.01 * i, 0.5))]
    (wall,) = bp.timed_rows(recs, policies=("graft+stop",))
    assert wall["best_fixed"] == "ddtree@8" and not wall["best_fixed_at_edge"]
    assert wall["vs_ar"] == pytest.approx(2.0 * 4 / sum(0.9 + 0.01 * i for i in range(4)))
    assert wall["vs_best_fixed"] == pytest.approx(0.8 * 4 / sum(0.9 + 0.01 * i for i in range(4)))
    lo, hi = wall["vs_best_fixed_ci"]
    assert lo <= wall["vs_best_fixed"] <= hi < 1
    (modeled,) = bp.timed_rows(recs, policies=("graft+stop",), time="modeled_speedup")
    assert modeled["best_fixed"] == "ddtree@16" and modeled["best_fixed_at_edge"]
    assert modeled["vs_best_fixed"] == pytest.approx(0.6 / 0.5) and modeled["vs_ar"] == pytest.approx(4.0)
    (alone,) = bp.timed_rows([r for r in recs if not r["key"].startswith("ddtree")], policies=("graft+stop",))
    assert alone["best_fixed"] is None and alone["vs_best_fixed"] is None and alone["vs_ar"] > 2
