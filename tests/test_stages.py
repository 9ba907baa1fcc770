"""The stage breakdown beside Table 1 (graftlib.lab.report.metrics.round_stages): pooled per-round arithmetic on
hand-made records."""

import pytest

from graftlib.core.errors import GraftError
from graftlib.lab.report.metrics import round_stages, stage_table


def record(task, key, rounds, decode_s, stage_s, accepted_sum, steps=None):
    rec = dict(task=task, key=key, rounds=rounds, decode_s=decode_s, accepted_sum=accepted_sum,
               stage_s=dict(zip(("draft", "tree", "verify", "commit"), stage_s)))
    if steps is not None:
        rec["draft_step_s"] = steps
    return rec


def test_pooled_stages_add_up_to_the_round():
    # two prompts of one AR-drafted run: 3 rounds, forwards (context, depth 1, ...) per round
    recs = [record("t", "eagle3@59", 2, 1.0, (0.4, 0.1, 0.3, 0.1), 6, [[0.1, 0.05, 0.05], [0.1, 0.05]]),
            record("t", "eagle3@59", 1, 0.5, (0.2, 0.0, 0.2, 0.0), 3, [[0.1, 0.05, 0.05]])]
    row = round_stages(recs)
    assert row["rounds"] == 3 and row["MAT"] == 3.0
    assert row["draft ms"] == pytest.approx(200) and row["verify ms"] == pytest.approx(500 / 3)
    assert row["round ms"] == pytest.approx(500) and row["ms/token"] == pytest.approx(500 / 3)
    parts = sum(row[f"{k} ms"] for k in ("draft", "tree", "verify", "commit", "other"))
    assert parts == pytest.approx(row["round ms"])
    assert row["forwards/round"] == pytest.approx(8 / 3)
    assert row["context fwd ms"] == pytest.approx(100) and row["depth fwd ms"] == pytest.approx(50)


def test_a_dflash_run_has_no_forward_columns_and_bad_input_is_named():
    dd = record("t", "ddtree@8", 4, 0.8, (0.1, 0.05, 0.5, 0.05), 10)
    row = round_stages([dd])
    assert "forwards/round" not in row and row["MAT"] == 2.5 and row["other ms"] == pytest.approx(25)
    rows = stage_table([dd, dict(dd, task="u")], [("u", "DDTree", "ddtree@8")])
    assert [(r["task"], r["method"], r["run"]) for r in rows] == [("u", "DDTree", "ddtree@8")]
    with pytest.raises(GraftError, match="no records of ddtree@16 on t"):
        stage_table([dd], [("t", "DDTree", "ddtree@16")])
    with pytest.raises(GraftError, match="several runs"):
        round_stages([dd, dict(dd, key="graft@64")])
    with pytest.raises(GraftError, match="has no rounds"):
        round_stages([dict(dd, rounds=0)])
