"""The two cost regimes (`graftlib.lab.regimes`): what decides and prices each, their runs, the MAT line, and
the figure claims' verdicts on hand-made curves and oracle rows (the notebook runs end to end in the
workbook's smoke profile, tests/test_workbook.py)."""

import pandas as pd
import pytest

from graftlib.lab.paper import FIGURE6
from graftlib.lab.paper_costs import mat_needed
from graftlib.lab.regimes import figure_claims, machine, needed_mat_line, paper, regime_runs
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


def _record(key, method, nodes, accepted, rounds, modeled_s):
    return {"key": key, "method": method, "budget": None, "uid": "p0", "rounds": rounds, "new_tokens": accepted + 1,
            "decode_s": 1.0, "accepted_sum": accepted, "nodes_sum": nodes, "stage_s": dict.fromkeys(
                ("draft", "tree", "verify", "commit"), 0.0), "modeled_s": modeled_s, "walked": method != "ar"}


def test_needed_mat_line_reads_graft_s_own_nodes():
    p = paper()
    recs = [_record("ar", "ar", 0, 100, 100, 2.0), _record("graft@512", "graft", 50 * 40, 100, 40, 1.0)]
    line = needed_mat_line(recs, p)
    assert f"needs MAT {mat_needed(p.profile, 5.28, 50):.2f}" in line and "has 2.50" in line
    assert needed_mat_line(recs[:1], p).startswith("no GRAFT run")


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
    F = figure_claims(curves, oracles, regimes)
    assert F.at["F1c", "machine wall-clock"].startswith("fails") and F.at["F1c", "machine modeled"].startswith("fails")
    assert F.at["F1c", "paper modeled"] == "holds (easy B=32, hard B=128)"
    assert "paper wall-clock" not in F.columns  # a walked regime has no measured figure
    assert F.at["F6", "machine wall-clock"] == "fails (50.0%)" and F.at["F6", "paper modeled"].startswith("holds")


@pytest.mark.parametrize("regime", [machine, paper])
def test_a_regime_names_itself(regime):
    r = regime()
    assert r.name in ("machine", "paper") and ("modeled" in r.label)
