"""The two cost regimes (`graftlib.lab.run.regimes`): what decides and prices each, their runs, the MAT line, and
the figure claims' verdicts on hand-made curves and oracle rows (the notebook runs end to end in the
workbook's smoke profile, tests/test_workbook.py)."""

import pandas as pd
import pytest

from graftlib.core.errors import GraftError
from graftlib.inputs.cost_profile import PAPER_PROFILE, CostProfile, default_profile
from graftlib.lab.report.modeled import EDGE
from graftlib.lab.report.paper import FIGURE6
from graftlib.lab.report.paper_costs import mat_needed
from graftlib.lab.report.regime_tables import (
    GSM8K_SCORER,
    against_fixed,
    figure_claims,
    mismatch_table,
    needed_mat_line,
    regime_components,
)
from graftlib.lab.report.tables import beta_table, transfer_table
from graftlib.lab.run.regimes import machine, paper, pick, regime_runs
from graftlib.methods.saba_params import PAPER_GRID


def test_the_paper_regime_decides_and_prices_with_the_papers_costs_and_walks():
    p, profile = paper(), CostProfile.load(PAPER_PROFILE)
    assert p.walk and p.profile.id == profile.id and (p.budget, p.cap) == (128, 512)
    assert (p.saba.c, p.saba.c_ar, p.saba.c_draft) == (profile.c, profile.c_ar, profile.c_draft)
    assert p.saba.grid == list(PAPER_GRID) and p.saba.meta["cost_profile"] == profile.label
    m = machine((4, 8, 16, 32), 64)
    assert not m.walk and m.saba is None and m.profile.id == default_profile().id and m.budget == 16
    keys = [r.key for r in regime_runs(p)]
    assert keys == ["ar", "dflash@15", *(f"ddtree@{b}" for b in (8, 16, 32, 64, 128, 256)), "ddtree+tdes@128",
                    "ddtree+saba@512",
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


def _prompts(method: str, tps: float, wall_tps: float | None, noise: float, phase: int, task: str = "gsm8k",
             mismatches: float = 0.0) -> list[dict]:
    """10 prompts' records of `method`, 100 tokens each at `tps` modeled (`wall_tps` measured; default the same),
    each prompt off by up to +-`noise`, a different pattern at each `phase`, summing to zero over the 10, so the
    pooled TPS is `tps` exactly while the paired ratios spread."""
    import math

    recs = []
    for i in range(10):
        off = 1 + noise * math.sin(2 * math.pi * i / 10 + 3 * phase)
        r = _record(method, method, 100, 100, 20, 100 / tps * off, task=task, mismatches=mismatches, eligible=100,
                    uid=f"p{i}")
        r["decode_s"] = 100 / (wall_tps or tps) * off
        recs.append(r)
    return recs


def _betas(tps: dict[str, list[float]], noise: float = 0.02) -> pd.DataFrame:
    """Table 3 (`beta_table`) from each beta's records at these TPS ("modeled TPS", and "TPS" measured where the
    regime verifies), 10 prompts of 100 tokens each."""
    betas = [0.0, 0.05, 0.1, 0.2, 0.4]
    wall = tps.get("TPS", [None] * len(betas))
    return beta_table({b: _prompts("graft", m, w, noise, k) for k, (b, m, w) in
                       enumerate(zip(betas, tps["modeled TPS"], wall, strict=True))}, walk="TPS" not in tps)


def _transfer(ratios: dict[tuple[str, str], tuple], noise: float = 0.02) -> pd.DataFrame:
    """Figure 5 (`transfer_table`) from records per (task, scorer): (mismatch reduction %, modeled TPS / DDTree,
    measured TPS / DDTree or None where the regime walks); DDTree at 10 tokens/s, 10 prompts."""
    records: dict[str, list[dict]] = {}
    for (task, scorer), (reduction, modeled, wall) in ratios.items():
        records.setdefault(scorer, []).extend(
            _prompts("ddtree", 10, 10, noise, 0, task, mismatches=10)
            + _prompts("ddtree+tdes", 10 * modeled, 10 * (wall or modeled), noise, 1, task,
                       mismatches=10 * (1 - reduction / 100)))
    walk = all(w is None for _, _, w in ratios.values())
    return transfer_table(records, walk)


def test_the_ratios_pair_prompts_so_a_prompt_s_difficulty_cancels():
    # prompts 1x to 3x as slow as each other, +TDES exactly 1.05x faster on each: the interval is the point
    records = {GSM8K_SCORER: [r for method, speed in (("ddtree", 1.0), ("ddtree+tdes", 1.05)) for r in
                              _prompts(method, 10 * speed, None, 0.0, 0, "mbpp", mismatches=10)]}
    for i, r in enumerate(records[GSM8K_SCORER]):
        r["modeled_s"] = r["decode_s"] = r["decode_s"] * (1 + 2 * (i % 10) / 9)
    F = transfer_table(records, walk=True).xs(GSM8K_SCORER, axis=1, level=1)
    assert "TPS / DDTree" not in F  # a walked regime has no measured ratio
    assert F.at["mbpp", "modeled TPS / DDTree"] == pytest.approx(1.05)
    assert (F.at["mbpp", "modeled TPS / DDTree CI95 low"], F.at["mbpp", "modeled TPS / DDTree CI95 high"]) == (
        pytest.approx(1.05), pytest.approx(1.05))
    T = _betas({"TPS": [10, 11, 12, 13, 9], "modeled TPS": [10, 11, 14, 13, 9]})
    assert T.at[0.0, "TPS / beta 0"] == 1.0 and T.at[0.0, "TPS / beta 0 CI95 low"] == 1.0
    assert T.at[0.2, "modeled TPS / beta 0"] == pytest.approx(1.3) and T.at[0.4,
                                                                            "TPS / beta 0.2"] == pytest.approx(9 / 13)
    assert T.at[0.2, "modeled TPS / beta 0 CI95 low"] < 1.3 < T.at[0.2, "modeled TPS / beta 0 CI95 high"]


def test_figure_5_a_task_inside_noise_is_no_transfer():
    F = _transfer({("mbpp", "full"): (30, 1.1, None), ("mbpp", GSM8K_SCORER): (20, 1.05, None),
                   ("alpaca", "full"): (30, 1.1, None), ("alpaca", GSM8K_SCORER): (20, 1.004, None)}, noise=0.05)
    cell = figure_claims({"paper": paper()}, transfer={"paper": F}, n_prompts=10).at["F5", "paper modeled"]
    assert cell.startswith("inside noise (TPS / DDTree mbpp 1.050x [") and "alpaca 1.004x [0.9" in cell


def test_figure_5_needs_both_parts_of_its_claim():
    """TPS / DDTree above 1 on every task is not enough: the claim says the mismatch falls too."""
    rises = _transfer({("mbpp", "full"): (30, 1.1, None), ("mbpp", GSM8K_SCORER): (-30, 1.05, None),
                       ("alpaca", "full"): (30, 1.1, None), ("alpaca", GSM8K_SCORER): (20, 1.05, None)})
    cell = figure_claims({"paper": paper()}, transfer={"paper": rises}, n_prompts=10).at["F5", "paper modeled"]
    assert cell.startswith("inside noise (TPS / DDTree") and "mismatch reduction mbpp -30%; alpaca +20%" in cell
    both = _transfer({("mbpp", "full"): (30, 1.1, None), ("mbpp", GSM8K_SCORER): (-30, 1.05, None)})
    assert figure_claims({"paper": paper()}, transfer={"paper": both}, n_prompts=10).at[
        "F5", "paper modeled"].startswith("opposite")  # the mismatch falls on no task


def test_table_3_near_ties_are_inside_noise():
    regimes = {"paper": paper()}
    tied = _betas({"modeled TPS": [10, 10.5, 10.6, 10.62, 10.61]}, noise=0.05)
    cell = figure_claims(regimes, betas={"paper": tied}, n_prompts=10, max_new_tokens=128).at["T3", "paper modeled"]
    assert cell.startswith("inside noise (beta 0.2: 1.001x [") and "over beta 0.4" in cell  # 0.1% ahead: a tie
    assert "best beta 0.2: 1.062x [" in cell  # TDES still helps: the best beta over beta 0 beside it
    flat = _betas({"modeled TPS": [10, 10.01, 10.0, 10.02, 9.99]}, noise=0.05)
    cell = figure_claims(regimes, betas={"paper": flat}, n_prompts=10, max_new_tokens=128).at["T3", "paper modeled"]
    assert cell.startswith("inside noise (beta 0.2: ")


def test_the_figure_claims_of_figure_1b_figure_5_and_table_3():
    regimes = {"machine": machine(), "paper": paper()}
    mismatch = {"machine": pd.DataFrame({"GRAFT reduction %": [20.0, -5.0], "+TDES reduction %": [5.0, 7.0]},
                                        index=["gsm8k", "mbpp"]),
                "paper": pd.DataFrame({"GRAFT reduction %": [20.0, 35.0], "+TDES reduction %": [-2.0, -4.0]},
                                      index=["gsm8k", "mbpp"])}
    transfer = {"machine": _transfer({("mbpp", "full"): (30, 1.1, 1.1), ("mbpp", GSM8K_SCORER): (20, 1.05, 0.9)}),
                "paper": _transfer({("mbpp", "full"): (30, 1.1, None), ("mbpp", GSM8K_SCORER): (20, 1.05, None)})}
    betas = {"machine": _betas({"TPS": [10, 11, 12, 13, 9], "modeled TPS": [10, 11, 14, 13, 9]}),
             "paper": _betas({"modeled TPS": [13, 11, 12, 10, 9]})}
    F = figure_claims(regimes, mismatch=mismatch, transfer=transfer, betas=betas, n_prompts=10, max_new_tokens=128)
    assert list(F.index) == ["F1b", "F1b-m", "F5", "T3"]
    assert F.at["F1b", "machine modeled"].startswith("inside noise")  # one task each way
    assert F.at["F1b", "paper modeled"] == "reproduced (reduction 20% to 35%)"
    # the mechanism apart from the system: +TDES at DDTree's budget, each with its own verdict
    assert F.at["F1b-m", "machine modeled"] == "reproduced (reduction 5% to 7%)"
    assert F.at["F1b-m", "paper modeled"] == "opposite (reduction -4% to -2%)"
    assert F.at["F1b", "paper counts"] == "2 tasks x 10 prompts x 128 tokens"
    assert F.at["F5", "machine modeled"].startswith("reproduced (TPS / DDTree mbpp 1.050x [1.0")
    assert F.at["F5", "machine wall-clock"].startswith("opposite")  # the GSM8K-only scorer's measured ratio is 0.9
    assert F.at["F5", "paper counts"] == "1 task x 10 prompts x 128 tokens"
    assert F.at["T3", "machine wall-clock"].startswith("reproduced (beta 0.2: 1.083x [")  # over the runner-up, 0.1
    assert "best beta 0.2: 1.300x [" in F.at["T3", "machine wall-clock"]
    # another beta best outside noise: the claim's ordering is opposite (it was "direction only" before the rule)
    assert F.at["T3", "machine modeled"].startswith("opposite (beta 0.2: 0.929x [") and "over beta 0.1" in F.at[
        "T3", "machine modeled"]
    assert F.at["T3", "paper modeled"].startswith("opposite (beta 0.2: 0.769x [") and "over beta 0" in F.at[
        "T3", "paper modeled"]
    few = figure_claims(regimes, mismatch=mismatch, betas=betas, n_prompts=2, max_new_tokens=64)
    assert few.at["F1b", "paper modeled"].startswith("not tested") and few.at["T3", "machine wall-clock"].startswith(
        "not tested")
    # Figure 5 never counts the GSM8K-only scorer's own task
    only_gsm = {"paper": _transfer({("gsm8k", "full"): (30, 1.1, None), ("gsm8k", GSM8K_SCORER): (20, 1.05, None)})}
    assert figure_claims({"paper": paper()}, transfer=only_gsm, n_prompts=10).at["F5", "paper modeled"].startswith(
        "not tested")


def _curve(best: dict[str, int], grid=(16, 32, 64, 128, 256), slope: float = 1 / 32, noise: float = 0.0):
    """Figure 1(c)'s curve over 10 prompts, with its per-prompt sums (`tables.budget_curve`): each prompt's TPS peaks
    at its group's best budget, give or take `noise` (up on half the prompts, down on the other half)."""
    rows = []
    for group, b_best in best.items():
        for b in grid:
            for p in range(10):
                tps = 10.0 - abs(b - b_best) * slope + noise * (-1) ** (p + (b == b_best))
                rows.append({"group": group, "B": b, "prompt": p, "a": 20.0, "l": 20.0 / tps, "m_l": 20.0 / tps})
    frame = pd.DataFrame(rows)
    curve = frame.groupby(["group", "B"], sort=False)[["a", "l", "m_l"]].sum()
    curve["tps"] = curve["m_tps"] = curve.a / curve.l
    curve.attrs["by_prompt"] = {}
    for r in rows:
        curve.attrs["by_prompt"].setdefault((r["group"], r["B"]), {})[r["prompt"]] = (r["a"], r["l"], r["m_l"])
    return curve


def _oracle(saba: list[float], fixed: dict[int, list[float]]) -> list[dict]:
    """Figure 6 rows, two rounds a prompt: SABA's retained share and each fixed budget's, per prompt."""
    return [{"round": 2 * p + k, "prompt": p, "retained": saba[p], "fixed": {b: v[p] for b, v in fixed.items()}}
            for p in range(len(saba)) for k in range(2)]


def test_figure_claims_hold_and_fail_as_the_figures_say():
    regimes = {"machine": machine(), "paper": paper()}
    curves = {"machine": _curve({"hard": 64, "medium": 64, "easy": 64}),
              "paper": _curve({"hard": 32, "medium": 64, "easy": 128})}
    high = FIGURE6["mean_retained"] + 0.01
    around = {32: [0.80] * 10, 128: [0.85] * 10}  # budgets on either side of the best fixed 64
    saba_wins = _oracle([high] * 10, {**around, 64: [0.90 + 0.002 * (p % 3) for p in range(10)]})
    fixed_wins = _oracle([0.85] * 10, {**around, 64: [0.90] * 10})
    noisy = _oracle([0.95 if p % 2 else 0.85 for p in range(10)], {**around, 64: [0.90] * 10})
    oracles = {"machine": {"wall-clock": fixed_wins, "modeled": noisy}, "paper": {"modeled": saba_wins}}
    F = figure_claims(regimes, curves, oracles, n_prompts=10, max_new_tokens=128)
    assert F.at["F1c", "machine wall-clock"].startswith("inside noise")  # the same best budget for easy and hard
    assert F.at["F1c", "paper modeled"] == ("reproduced (easy B=128, hard B=32; easy at B=128 / at B=32: 1.429x "
                                            "[1.429, 1.429]; hard at B=32 / at B=128: 1.429x [1.429, 1.429])")
    # bests apart in the sums but not beyond the prompts' noise: the thirds' best budgets do not differ
    flat = {"paper": _curve({"hard": 32, "medium": 64, "easy": 128}, slope=0.0005, noise=1.0)}
    cell = figure_claims({"paper": paper()}, flat, n_prompts=10, max_new_tokens=128).at["F1c", "paper modeled"]
    assert cell.startswith("inside noise (easy B=128, hard B=32; easy at B=128 / at B=32: 1.00")
    assert "paper wall-clock" not in F.columns  # a walked regime has no measured figure
    assert F.at["F6b", "machine wall-clock"].startswith("opposite (SABA / best fixed B=64: 0.944x")
    # the best fixed budget against the runner-up (B=128 at 0.85): a best beyond noise
    assert F.at["F6b", "machine wall-clock"].endswith("B=64 over the runner-up B=128: 1.059x [1.059, 1.059], apart)")
    tie = _oracle([0.85] * 10, {32: [0.80] * 10, 64: [0.90 + 0.05 * (-1) ** p for p in range(10)],
                                128: [0.90 - 0.05 * (-1) ** p + 0.001 for p in range(10)]})
    tied = figure_claims({"paper": paper()}, oracles={"paper": {"modeled": tie}}, n_prompts=10, max_new_tokens=128)
    cell = tied.at["F6b", "paper modeled"]
    assert cell.endswith("inside noise)") and "B=128 over the runner-up B=64: 1.00" in cell
    assert F.at["F6", "machine wall-clock"] == "direction only (85.0% [85.0%, 85.0%] vs the paper's 94.1%)"  # a level
    assert F.at["F6b", "machine modeled"].startswith("inside noise")  # SABA above on half the prompts, below on half
    assert F.at["F6b", "paper modeled"].startswith("reproduced") and F.at["F6",
                                                                          "paper modeled"].startswith("reproduced")
    assert "gain prediction only" in F.at["F6", "tests"]
    short = _oracle([0.93] * 10, {**around, 64: [0.90] * 10})  # above the best fixed budget, short of the paper's
    G = figure_claims({"paper": paper()}, oracles={"paper": {"modeled": short}}, n_prompts=10, max_new_tokens=128)
    assert G.at["F6", "paper modeled"] == "direction only (93.0% [93.0%, 93.0%] vs the paper's 94.1%)"
    near = _oracle([0.93 + 0.03 * (p % 2) for p in range(10)], {**around, 64: [0.90] * 10})  # 94.5% on half
    assert figure_claims({"paper": paper()}, oracles={"paper": {"modeled": near}}, n_prompts=10,
                         max_new_tokens=128).at["F6", "paper modeled"].startswith("reproduced (94.5% [")
    assert list(F.index) == ["F1c", "F6", "F6b"]  # items not given are not rows
    # a best at the edge of its grid tests nothing: Figure 1(c)'s hard rounds at the smallest budget, Figure 6's
    # best fixed budget at the largest
    E = figure_claims({"paper": paper()}, {"paper": _curve({"hard": 32, "easy": 128}, grid=(32, 64, 128))},
                      {"paper": {"modeled": _oracle([high] * 10, {32: [0.8] * 10, 64: [0.9] * 10})}},
                      n_prompts=10, max_new_tokens=128)
    assert E.at["F1c", "paper modeled"].startswith(f"{EDGE} (easy B=128, hard B=32; ")
    assert E.at["F6b", "paper modeled"].startswith(f"{EDGE} (SABA / best fixed B=64")
    assert E.at["F6", "paper modeled"].startswith("reproduced (95.1% [")  # a level: no budget grid in it
    assert against_fixed(fixed_wins)["best_fixed_budget"] == 64 and against_fixed(fixed_wins)["prompts"] == 10


@pytest.mark.parametrize("regime", [machine, paper])
def test_a_regime_names_itself(regime):
    r = regime()
    assert r.name in ("machine", "paper") and ("modeled" in r.label)


def test_the_claims_figure_draws_every_cell_whole():
    """No claim or verdict is cut short: each drawn cell, its line breaks undone, is the data's full text."""
    from matplotlib.table import Table

    from graftlib.lab.workbook.plots.claims import plot_claims

    long = "direction only (1.031x [1.012, 1.050] vs the paper's 1.057x) (tasks: 2 direction only, 1 inside noise)"
    words = "beta = 0.2 gives the highest TPS of beta in {0, 0.05, 0.1, 0.2, 0.4}"
    C = pd.DataFrame({"source": ["Table 3"], "paper": [words], "paper modeled": [long],
                      "paper counts": ["3 tasks x 10 prompts x 128 tokens"]}, index=["T3"])
    fig = plot_claims(C, "claims")
    (table,) = [a for a in fig.axes[0].get_children() if isinstance(a, Table)]
    drawn = {(r, c): " ".join(cell.get_text().get_text().split()) for (r, c), cell in table.get_celld().items()}
    assert drawn[(1, 0)] == "T3 (Table 3): " + C.at["T3", "paper"]
    assert drawn[(1, 1)] == long and drawn[(1, 2)] == C.at["T3", "paper counts"]  # the one counts column
    assert drawn[(0, 1)] == "paper's A100 costs, modeled"
    assert "\n" in table.get_celld()[(1, 1)].get_text().get_text()  # wrapped, not cut


def test_the_paper_acceptance_regime_takes_the_parts_fitted_on_the_construction(tmp_path):
    """Its TDES scorers and SABA calibration are the shipped `paper-acceptance` ones (missing: one line naming the
    command that makes them); the other regimes take the scorer they are given."""
    from graftlib.inputs.artifacts import ShippedAssets
    from graftlib.lab.run.regimes import paper_acceptance

    repo, assets = ShippedAssets(), ShippedAssets(tmp_path)
    with pytest.raises(GraftError, match="graft prepare --strength own-spine --task-scorers gsm8k --ship"):
        paper_acceptance(assets=assets)
    with pytest.raises(GraftError, match="unknown drafter-strength calibration 'wide' for the third regime"):
        paper_acceptance(calibration="wide")
    with pytest.raises(GraftError, match=r"the paper\+pinned regime's parts are missing \(.*paper-acceptance-pinned"):
        paper_acceptance(calibration="pinned", assets=assets)
    r = paper_acceptance(assets=repo)
    assert r.scorer() == str(repo.tdes("paper-acceptance")) and r.scorer("x.safetensors") == r.scorer()
    assert r.scorer(task="gsm8k") == str(repo.tdes("paper-acceptance-gsm8k"))
    assert r.saba.id != paper().saba.id and r.saba.c == paper().saba.c  # its own fit, deciding at the paper's costs
    assert paper().scorer() is None and paper().scorer("x.safetensors", "gsm8k") == "x.safetensors"


def test_every_figure_claim_has_one_rule_and_the_docs_table_it():
    from pathlib import Path

    from graftlib.lab.report.regime_tables import FIGURE_CLAIMS, VERDICT_RULES

    assert set(VERDICT_RULES) == set(FIGURE_CLAIMS)
    usage = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text()
    for item, rule in VERDICT_RULES.items():
        assert f"| {item} | {FIGURE_CLAIMS[item][1]} | {rule} |" in usage, item


def test_the_robust_column_names_a_verdict_only_where_every_calibration_gives_it():
    from graftlib.lab.report.regime_tables import budget_set, robust_column

    names = ["paper+acceptance", "paper+pinned", "paper+true-path"]
    C = pd.DataFrame({"source": ["Table 1"] * 3, "paper": ["x"] * 3,
                      "paper+acceptance modeled": ["reproduced (1.3x)", "inside noise (1.0x)", "reproduced (2x)"],
                      "paper+pinned modeled": ["reproduced (1.4x)", "direction only (1.1x)", None],
                      "paper+true-path modeled": ["reproduced (1.5x)", "opposite (0.9x)", "reproduced (2x)"]},
                     index=["C1", "C2", "C3"])
    R = robust_column(C, names)
    assert R.at["C1", "paper+acceptance robust"] == "reproduced"
    assert R.at["C2", "paper+acceptance robust"] == ("depends on the drafter's tree gain (paper+acceptance: inside "
                                                     "noise; paper+pinned: direction only; paper+true-path: opposite)")
    assert pd.isna(R.at["C3", "paper+acceptance robust"])  # a calibration without the cell decides nothing
    with pytest.raises(GraftError, match="the robust column needs the columns"):
        robust_column(C.drop(columns="paper+pinned modeled"), names)
    assert budget_set([32, 48, 64, 80, 96, 128]) == "B in {32, 48, 64, 80, 96, 128} (the paper's set)"
    assert budget_set([2, 0, 4]) == "B in {0 (AR step), 2, 4}"


def test_every_third_regime_is_named_by_its_calibration():
    from graftlib.lab.run.regimes import ACCEPTANCE_REGIMES, named
    from graftlib.models.strength import CALIBRATIONS

    assert set(ACCEPTANCE_REGIMES.values()) == set(CALIBRATIONS)
    r = named("machine,paper+acceptance", None)["paper+acceptance"]
    assert r.name == "paper+acceptance" and "own-spine" in r.label and r.suffix == "_paper_acceptance"


def test_a_construction_is_checked_on_what_it_was_not_fitted_on():
    """Table 2's rows, Table 3's mismatch at beta 0.2, the best budgets and the tree's gain per task, each beside the
    paper's number where the paper has one."""
    from graftlib.lab.report.tables import construction_checks

    def rec(task, key, mat):  # 20 rounds at MAT `mat`
        return _record(key, key.partition("@")[0], 20 * int(key.partition("@")[2]), 20 * mat, 20, 1.0, task=task)

    records = [rec("gsm8k", "dflash@15", 5), rec("gsm8k", "ddtree@128", 7), rec("mbpp", "dflash@15", 4)]
    components = pd.DataFrame({"MAT": [8.0, 7.0, 7.5], "nodes/round": [128.0, 40.0, 38.0]},
                              index=["+TDES", "+SABA", "GRAFT"])
    betas = pd.DataFrame({"mismatch reduction %": [0.0, 30.0]}, index=[0.0, 0.2])
    checks = construction_checks(records, components, betas, _curve({"hard": 32, "easy": 128}),
                                 {"best_fixed_budget": 48}).set_index("check")
    assert checks.at["Table 2 GRAFT MAT", "ours"] == 7.5 and checks.at["Table 2 GRAFT MAT", "paper"] == 7.62
    assert checks.at["Table 2 +SABA nodes a round", "paper"] == 49.1
    assert checks.at["Table 3 mismatch reduction % at beta 0.2", "paper"] == 54.71
    assert checks.at["Figure 1(c) best budget, easy third", "ours"] == 128 and checks.at[
        "Figure 6 best fixed budget", "ours"] == 48
    (gain,) = [c for c in checks.index if c.startswith("tree / chain MAT")]  # mbpp ran no tree: no row
    assert gain.startswith("tree / chain MAT, gsm8k") and "DDTree paper 1.45" in gain
    assert checks.at[gain, "ours"] == pytest.approx(7 / 5) and checks.at[gain, "paper"] == pytest.approx(8.18 / 5.82)


def test_every_registered_method_has_one_label_and_the_tables_read_any_of_them():
    """Method labels live in the registry, one row each: a method added there reaches every table (a record of a
    method without a label was a KeyError in `regime_table`)."""
    from graftlib.lab.report.regime_tables import regime_table
    from graftlib.methods.registry import LABELS, METHODS

    assert set(LABELS) == set(METHODS) and all(LABELS.values()) and len(set(LABELS.values())) == len(LABELS)
    recs = [_record(f"{m}@16" if m != "ar" else "ar", m, 16 * 20, 40, 20, 1.0) for m in METHODS]
    T = regime_table(recs, paper())
    assert list(T["method"]) == [LABELS[m] for m in METHODS] and T.at["graft+pred@16", "method"] == "GRAFT+pred"


def test_a_budget_curve_keeps_its_prompts_and_concatenates_with_another():
    """`budget_curve`'s per-prompt sums ride in plain dicts: pandas compares attrs when the notebooks concatenate
    the regimes' curves (a DataFrame there made `pd.concat` raise)."""
    from graftlib.lab.report.tables import best_gap, budget_curve
    from graftlib.training.graft.replay import ReplayRecord

    recs = [ReplayRecord(round=r, budget=b, nodes=b, accepted=1 + (b >= 4) * (r % 3), prefix_len=10, t_draft=0.001,
                         t_tree=0.0, t_verify=0.01 * (1 + b / 8), t_commit=0.0, tokens=[], state=[0, 0, 0, 1],
                         reference_budget=8) for r in range(12) for b in (2, 4, 8)]
    curve = budget_curve(recs, [2, 4, 8], CostProfile.load(PAPER_PROFILE), {r: r // 3 for r in range(12)})
    assert set(curve.attrs["by_prompt"][("easy", 8)]) <= {0, 1, 2, 3}
    both = pd.concat({"a": curve, "b": curve.copy()}, names=["regime"])  # raised before
    assert len(both) == 2 * len(curve)
    ratio, ci = best_gap(curve, "easy", 8, 2)
    assert ratio == pytest.approx(curve.at[("easy", 8), "tps"] / curve.at[("easy", 2), "tps"]) and ci is not None
