"""The two cost regimes (`graftlib.lab.regimes`): what decides and prices each, their runs, the MAT line, and
the figure claims' verdicts on hand-made curves and oracle rows (the notebook runs end to end in the
workbook's smoke profile, tests/test_workbook.py)."""

import pandas as pd
import pytest

from graftlib.core.errors import GraftError
from graftlib.lab.paper import FIGURE6
from graftlib.lab.paper_costs import mat_needed
from graftlib.lab.regimes import (
    GSM8K_SCORER,
    figure_claims,
    machine,
    mismatch_table,
    needed_mat_line,
    paper,
    pick,
    regime_components,
    regime_runs,
)
from graftlib.methods.cost_profile import PAPER_PROFILE, CostProfile, default_profile
from graftlib.methods.saba_params import PAPER_GRID


def test_the_paper_regime_decides_and_prices_with_the_papers_costs_and_walks():
    p, profile = paper(), CostProfile.load(PAPER_PROFILE)
    assert p.walk and p.profile.id == profile.id and (p.budget, p.cap) == (128, 512)
    assert (p.saba.c, p.saba.c_ar, p.saba.c_draft) == (profile.c, profile.c_ar, profile.c_draft)
    assert p.saba.grid == list(PAPER_GRID) and p.saba.meta["cost_profile"] == profile.label
    m = machine((4, 8, 16, 32), 64)
    assert not m.walk and m.saba is None and m.profile.id == default_profile().id and m.budget == 16
    keys = [r.key for r in regime_runs(p)]
    assert keys == ["ar", "dflash@15", "ddtree@64", "ddtree@128", "ddtree@256", "ddtree+tdes@128", "ddtree+saba@512",
                    "graft@512", "caddtree@512", "eagle3@59", "opt-tree@50"]
    assert [r.key for r in regime_runs(m, ar_drafted=False)][-3:] == ["ddtree+saba@64", "graft@64", "caddtree@64"]


def test_pick_keeps_the_named_regimes_in_order_and_names_a_bad_list():
    both = {"machine": machine(), "paper": paper()}
    assert list(pick("paper, machine", both)) == ["machine", "paper"]
    assert list(pick("paper", both, required="paper")) == ["paper"]
    for names, words in (("gpu", "unknown regime 'gpu'"), ("", "name a regime"), ("machine", "name paper")):
        with pytest.raises(GraftError, match=words):
            pick(names, both, required="paper" if names == "machine" else None)


def _record(key, method, nodes, accepted, rounds, modeled_s, task="gsm8k", mismatches=0, eligible=10, uid="p0"):
    return {"key": key, "method": method, "budget": None, "uid": uid, "task": task, "rounds": rounds,
            "new_tokens": accepted + 1, "decode_s": 1.0, "accepted_sum": accepted, "nodes_sum": nodes,
            "stage_s": dict.fromkeys(("draft", "tree", "verify", "commit"), 0.0), "modeled_s": modeled_s,
            "walked": method != "ar", "mismatch_sum": mismatches, "eligible_sum": eligible}


def test_needed_mat_line_reads_graft_s_own_nodes():
    p = paper()
    recs = [_record("ar", "ar", 0, 100, 100, 2.0), _record("graft@512", "graft", 50 * 40, 100, 40, 1.0)]
    line = needed_mat_line(recs, p)
    assert f"needs MAT {mat_needed(p.profile, 5.28, 50):.2f}" in line and "has 2.50" in line
    assert needed_mat_line(recs[:1], p).startswith("no GRAFT run")
    assert needed_mat_line(recs, p, "mt-bench").startswith("the paper's Table 1 has no mt-bench row")


def test_the_fixed_budget_runs_even_where_the_budgets_leave_it_out():
    keys = [r.key for r in regime_runs(machine((4, 32), 64, (3,), 16), ar_drafted=False)]
    assert keys == ["ar", "dflash@3", "ddtree@4", "ddtree@16", "ddtree@32", "ddtree+tdes@16", "ddtree+saba@64",
                    "graft@64", "caddtree@64"]


def test_mismatch_table_reads_each_task_s_rates_at_the_regime_s_runs():
    m = machine((8, 16), 64, budget=16)
    recs = []
    for task, (d, t, g) in {"gsm8k": (4, 2, 1), "mbpp": (2, 3, 4)}.items():
        recs += [_record("ddtree@16", "ddtree", 160, 30, 10, 1.0, task, d),
                 _record("ddtree@8", "ddtree", 80, 30, 10, 1.0, task, 9),  # another budget: not Figure 1(b)'s
                 _record("ddtree+tdes@16", "ddtree+tdes", 160, 30, 10, 1.0, task, t),
                 _record("graft@64", "graft", 300, 30, 10, 1.0, task, g)]
    M = mismatch_table(recs, m)
    assert M.loc["gsm8k", "DDTree"] == pytest.approx(0.4) and M.loc["gsm8k", "GRAFT reduction %"] == pytest.approx(75)
    assert M.loc["mbpp", "+TDES reduction %"] == pytest.approx(-50) and M.loc["mbpp", "GRAFT"] == pytest.approx(0.4)


def test_regime_components_price_each_component_against_ddtree_and_show_no_wall_clock_when_walked():
    p = paper()
    recs = [_record("ar", "ar", 0, 100, 100, 2.0), _record("ddtree@128", "ddtree", 128 * 20, 100, 20, 1.0),
            _record("ddtree+tdes@128", "ddtree+tdes", 128 * 20, 100, 20, 0.8),
            _record("graft@512", "graft", 50 * 20, 100, 20, 0.5)]
    T = regime_components(recs, p)
    assert list(T.index) == ["DDTree", "+TDES", "GRAFT"] and "dTPS %" not in T.columns
    assert T.at["+TDES", "m-dTPS %"] == pytest.approx(25) and T.at["GRAFT", "m-dTPS %"] == pytest.approx(100)
    assert T.at["GRAFT", "nodes/round"] == pytest.approx(50) and T.at["GRAFT", "paper dTPS %"] == 19.4
    with pytest.raises(GraftError, match="no ddtree@128 records"):
        regime_components(recs[:1], p)


def test_the_figure_claims_of_figure_1b_figure_5_and_table_3():
    regimes = {"machine": machine(), "paper": paper()}
    mismatch = {"machine": pd.DataFrame({"GRAFT reduction %": [20.0, -5.0]}, index=["gsm8k", "mbpp"]),
                "paper": pd.DataFrame({"GRAFT reduction %": [20.0, 35.0]}, index=["gsm8k", "mbpp"])}
    cols = pd.MultiIndex.from_product([["mismatch reduction %", "modeled TPS / DDTree", "TPS / DDTree"],
                                       ["full", GSM8K_SCORER]])
    transfer = {"machine": pd.DataFrame([[30, 20, 1.1, 1.05, 1.1, 0.9]], index=["mbpp"], columns=cols),
                "paper": pd.DataFrame([[30, 20, 1.1, 1.05]], index=["mbpp"], columns=cols[:4])}
    betas = {"machine": pd.DataFrame({"TPS": [10, 11, 12, 13, 9], "modeled TPS": [10, 11, 14, 13, 9]},
                                     index=[0.0, 0.05, 0.1, 0.2, 0.4]),
             "paper": pd.DataFrame({"modeled TPS": [10, 11, 12, 13, 9]}, index=[0.0, 0.05, 0.1, 0.2, 0.4])}
    F = figure_claims(regimes, mismatch=mismatch, transfer=transfer, betas=betas)
    assert list(F.index) == ["F1b", "F5", "T3"]
    assert F.at["F1b", "machine modeled"].startswith("fails") and F.at["F1b", "paper modeled"] == \
        "holds (reduction 20% to 35%)"
    assert F.at["F5", "machine modeled"] == "holds (TPS / DDTree 1.050-1.050)"
    assert F.at["F5", "machine wall-clock"].startswith("fails")  # the GSM8K-only scorer's measured ratio is 0.9
    assert F.at["T3", "machine wall-clock"] == "holds (best beta 0.2)"
    assert F.at["T3", "machine modeled"] == "fails (best beta 0.1)" and F.at["T3", "paper modeled"].startswith("holds")


def _curve(best: dict[str, int]):
    rows = []
    for group, b_best in best.items():
        for b in (32, 64, 128):
            tps = 10.0 - abs(b - b_best) / 32
            rows.append({"group": group, "B": b, "tps": tps, "m_tps": tps, "rounds": 3})
    return pd.DataFrame(rows).set_index(["group", "B"])


def test_figure_claims_hold_and_fail_as_the_figures_say():
    regimes = {"machine": machine(), "paper": paper()}
    curves = {"machine": _curve({"hard": 64, "medium": 64, "easy": 64}),
              "paper": _curve({"hard": 128, "medium": 64, "easy": 32})}
    high = [{"retained": FIGURE6["mean_retained"] + 0.01}] * 3
    oracles = {"machine": {"wall-clock": [{"retained": 0.5}] * 2, "modeled": high}, "paper": {"modeled": high}}
    F = figure_claims(regimes, curves, oracles)
    assert F.at["F1c", "machine wall-clock"].startswith("fails") and F.at["F1c", "machine modeled"].startswith("fails")
    assert F.at["F1c", "paper modeled"] == "holds (easy B=32, hard B=128)"
    assert "paper wall-clock" not in F.columns  # a walked regime has no measured figure
    assert F.at["F6", "machine wall-clock"] == "fails (50.0%)" and F.at["F6", "paper modeled"].startswith("holds")
    assert list(F.index) == ["F1c", "F6"]  # items not given are not rows


@pytest.mark.parametrize("regime", [machine, paper])
def test_a_regime_names_itself(regime):
    r = regime()
    assert r.name in ("machine", "paper") and ("modeled" in r.label)
