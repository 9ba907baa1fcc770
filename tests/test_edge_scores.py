"""TDES vs DFlash 2's selector vs both (`graftlib.lab.run.edge_scores`): the runs, the table's figures on hand-made
records (per task and pooled), the figure, and the one-line error for a drafter without a selector. The
notebook section runs end to end in the workbook's smoke profile (tests/test_workbook.py)."""

from types import SimpleNamespace

import pandas as pd
import pytest

from graftlib.core.errors import GraftError
from graftlib.lab.run.edge_scores import POOLED, edge_score_records, edge_score_runs, edge_score_table
from graftlib.lab.run.regimes import machine, paper
from graftlib.lab.workbook.plots.tables import plot_edge_scores


def _record(method, budget, task, uid, accepted, rounds, modeled_s, mismatches, decode_s=1.0, nodes=None):
    key = method if budget is None else f"{method}@{budget}"
    return {"key": key, "method": method, "budget": budget, "uid": uid, "task": task, "rounds": rounds,
            "new_tokens": accepted + 1, "decode_s": decode_s, "accepted_sum": accepted,
            "nodes_sum": (budget or 0) * rounds if nodes is None else nodes,
            "stage_s": dict.fromkeys(("draft", "tree", "verify", "commit"), 0.0), "modeled_s": modeled_s,
            "mismatch_sum": mismatches, "eligible_sum": 10}


def _records(budget, walked=False):
    recs = []
    # per task: (ddtree, +tdes, +sel, +both) as (accepted, modeled_s, mismatches) over 10 rounds
    for task, rows in {"gsm8k": ((20, 1.0, 4), (25, 0.9, 2), (30, 0.8, 1), (32, 0.75, 1)),
                       "mbpp": ((20, 1.0, 2), (20, 1.0, 2), (18, 1.2, 3), (22, 0.9, 2))}.items():
        recs.append(_record("ar", None, task, task, 20, 20, 2.0, 0))
        for method, (acc, s, mis) in zip(("ddtree", "ddtree+tdes", "ddtree+sel", "ddtree+tdes+sel"), rows,
                                          strict=True):
            recs.append(dict(_record(method, budget, task, task, acc, 10, s, mis, decode_s=2 * s), walked=walked))
    return recs


def test_the_runs_are_ar_and_the_four_edge_scores_at_the_regime_s_budget():
    assert [r.key for r in edge_score_runs(paper())] == ["ar", "ddtree@128", "ddtree+tdes@128", "ddtree+sel@128",
                                                         "ddtree+tdes+sel@128"]
    assert [r.key for r in edge_score_runs(machine((4, 8, 16), 64))][1:2] == ["ddtree@8"]


def test_the_table_gives_each_edge_score_against_ddtree_per_task_and_pooled():
    m = machine((8, 16), 64, budget=16)
    T = edge_score_table(_records(16), m)
    assert list(dict.fromkeys(T.index.get_level_values("task"))) == ["gsm8k", "mbpp", POOLED]
    assert T.loc[("gsm8k", "+selector"), "mismatch reduction %"] == pytest.approx(75)
    assert T.loc[("gsm8k", "+TDES"), "MAT"] == pytest.approx(2.5)
    assert T.loc[("mbpp", "+selector"), "modeled TPS / DDTree"] == pytest.approx((18 / 1.2) / (20 / 1.0))
    assert T.loc[("gsm8k", "+TDES+selector"), "TPS / DDTree"] == pytest.approx((32 / 1.5) / (20 / 2.0))
    assert pd.isna(T.loc[("gsm8k", "+TDES"), "TPS / DDTree lo"])  # one prompt a task: no interval
    pooled = T.loc[(POOLED, "+TDES")]
    assert pooled["mismatch rate"] == pytest.approx(4 / 20) and pooled["mismatch reduction %"] == pytest.approx(100 / 3)
    assert pooled["MAT"] == pytest.approx(45 / 20) and pooled["prompts"] == 2
    walked = edge_score_table(_records(128, walked=True), paper())
    assert "TPS / DDTree" not in walked.columns  # walked decodes are modeled only
    with pytest.raises(GraftError, match="no ddtree@16 records"):
        edge_score_table([r for r in _records(16) if r["method"] != "ddtree"], m)


def test_the_figure_draws_a_row_per_regime():
    tables = {"this machine": edge_score_table(_records(16), machine((8, 16), 64, budget=16)),
              "the paper's costs": edge_score_table(_records(128, walked=True), paper())}
    fig = plot_edge_scores(tables, "TDES vs the selector")
    assert len(fig.axes) == 6 and "the paper's costs" in fig.axes[3].get_title()
    assert len(fig.axes[0].patches) == 4 * 3  # four edge scores x (two tasks + pooled)


def test_a_drafter_without_a_selector_is_named():
    pair = SimpleNamespace(drafter=SimpleNamespace())
    with pytest.raises(GraftError, match="has no DFlash 2 candidate selector"):
        edge_score_records(pair, machine(), ["gsm8k"], 1, 8, "results")


def test_the_wall_clock_ratio_pairs_each_prompt_with_ddtree_s_and_has_an_interval():
    recs = []
    for uid, slow in (("p0", 1.0), ("p1", 2.0), ("p2", 4.0)):  # prompts of different lengths, TDES 1.25x on each
        recs += [_record("ddtree", 16, "gsm8k", uid, 20, 10, 1.0, 2, decode_s=slow),
                 _record("ddtree+tdes", 16, "gsm8k", uid, 20, 10, 1.0, 1, decode_s=slow / 1.25)]
    row = edge_score_table(recs, machine((8, 16), 64, budget=16)).loc[("gsm8k", "+TDES")]
    assert row["TPS / DDTree"] == pytest.approx(1.25)
    assert row["TPS / DDTree lo"] == pytest.approx(1.25) and row["TPS / DDTree hi"] == pytest.approx(1.25)


def test_the_paper_s_tdes_row_stands_beside_ours():
    T = edge_score_table(_records(128), paper())
    assert T.loc[("gsm8k", "+TDES"), "paper TPS / DDTree"] == pytest.approx(1.057)
    assert pd.isna(T.loc[("gsm8k", "+selector"), "paper TPS / DDTree"])
