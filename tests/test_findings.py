"""A paper item's closing is read from its verdicts: the claims it tests, every column, contradictions and caveat."""

import pandas as pd
import pytest

from graftlib.core.errors import GraftError
from graftlib.lab.report.findings import closing
from graftlib.lab.run import regimes as rg


def _claims() -> pd.DataFrame:
    cells = {
        "C4": ("Table 2", "+TDES improves TPS by 5.7% at DDTree's fixed budget",
               "inside noise (1.004x [0.990, 1.020] vs the paper's 1.057x)",
               "direction only (1.012x [1.005, 1.020] vs the paper's 1.057x)",
               "reproduced (1.087x [1.050, 1.120] vs the paper's 1.057x)"),
        "C5": ("Table 2", "+SABA reduces tree size and still improves TPS by 12.8%",
               "opposite (0.870x [0.830, 0.910] vs the paper's 1.128x)",
               "opposite (0.905x [0.880, 0.930] vs the paper's 1.128x)",
               "direction only (1.041x [1.010, 1.070] vs the paper's 1.128x)"),
        "C1": ("Table 1 (i)", "GRAFT achieves the highest wall-time speedup (vs DDTree)", "x", "x", "x"),
    }
    rows = {k: {"source": s, "paper": p, "machine wall-clock": w, "machine modeled": m,
                "machine counts": "3 tasks x 10 prompts x 128 tokens", "paper+acceptance modeled": a,
                "paper+acceptance counts": "3 tasks x 10 prompts x 128 tokens"} for k, (s, p, w, m, a) in cells.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


def test_closing_reads_every_verdict_of_the_items_claims_and_names_contradictions(tmp_path):
    regimes = {"machine": rg.machine(), "paper+acceptance": rg.paper_acceptance()}
    F = closing("Table 2", _claims(), regimes)
    assert list(dict.fromkeys(F.frame.claim)) == ["C4", "C5"]  # C1 is Table 1's
    assert F.verdicts("C4") == {"machine wall-clock": _claims().at["C4", "machine wall-clock"],
                                "machine modeled": _claims().at["C4", "machine modeled"],
                                "paper+acceptance modeled": _claims().at["C4", "paper+acceptance modeled"]}
    text = F.markdown()
    for cell in _claims().loc[["C4", "C5"]].drop(columns=["source", "paper"]).to_numpy().ravel():
        if "counts" not in cell:
            assert cell in text
    assert "Contradicts the paper: C5 (this machine: measured and modeled, wall-clock); C5 (this machine" in text
    assert "a construction" in text and "drafter-strength construction" in text  # the third regime is labelled
    assert "3 tasks x 10 prompts x 128 tokens" in text
    saved = pd.read_csv(F.save(tmp_path, "table2"))
    assert set(saved.verdict) == set(F.frame.verdict) and saved.caveat.nunique() == 1


def test_a_closing_without_its_claims_is_refused_in_one_line():
    with pytest.raises(GraftError, match="Figure 6: the claims table has none of F6, F6b"):
        closing("Figure 6", _claims(), {"machine": rg.machine()})
    with pytest.raises(GraftError, match="unknown paper item"):
        closing("Figure 9", _claims(), {"machine": rg.machine()})
