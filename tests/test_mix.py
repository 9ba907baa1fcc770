"""The mixed workload (`graftlib.lab.run.mix`) and its comparison (`budget_policy.mix_rows`): categories split a
bench's records by task and turn, validation prompts never overlap the held-out ones, and on records whose times are
known the ratios to the mix's best single fixed budget, to each category's own and to AR are the right ones."""

import pytest

from graftlib.core.errors import GraftError
from graftlib.data.prompts import load_items
from graftlib.lab.report.budget_policy import COMPOSITE, mix_rows
from graftlib.lab.report.multiturn import combine, turn_records
from graftlib.lab.run.mix import CATEGORIES, categories, validation_items

TOKENS = 101  # new tokens a record decodes (100 after the prefill's)


def rec(key: str, uid: str, seconds: float, task: str = "gsm8k", ar_rounds: int = 0) -> dict:
    method, _, budget = key.partition("@")
    return {"key": key, "method": method, "budget": int(budget) if budget else None, "uid": uid, "task": task,
            "rounds": 50, "new_tokens": TOKENS, "decode_s": seconds, "modeled_s": seconds / 2, "accepted_sum": 100,
            "nodes_sum": 400, "ar_rounds": ar_rounds, "matches_ar": True,
            "stage_s": dict.fromkeys(("draft", "tree", "verify", "commit"), 0.0)}


def category(task: str, seconds: dict[str, float], prompts: int = 4) -> list[dict]:
    """Records of `prompts` prompts, each run at `seconds[key]` (the i-th prompt 1 + i/10 times slower)."""
    return [rec(key, f"{task}/{i}", s * (1 + i / 10), task) for i in range(prompts) for key, s in seconds.items()]


def test_pred_is_compared_with_the_mix_s_best_single_budget_and_each_category_s_own():
    # math's best is 8 nodes (2 s), chat's 2 nodes (4 s); over the mix 2 nodes (3 + 4 s) beat 8 (2 + 6 s)
    math = category("gsm8k", {"ar": 10.0, "ddtree@2": 3.0, "ddtree@8": 2.0, "graft+pred@64": 2.0})
    chat = category("alpaca", {"ar": 10.0, "ddtree@2": 4.0, "ddtree@8": 6.0, "graft+pred@64": 4.0})
    rows = {(r["category"], r["kind"]): r for r in mix_rows({"gsm8k": math, "alpaca": chat}, policies=("graft+pred",))}
    pooled = rows[("all", "graft+pred")]
    assert pooled["best_fixed"] == "ddtree@2"
    assert pooled["vs_best_fixed"] == pytest.approx(7.0 / 6.0)  # 3 + 4 s against 2 + 4 s, every prompt alike
    assert 1.0 <= pooled["ci_low"] < 7.0 / 6.0 < pooled["ci_high"] <= 1.5 and pooled["prompts"] == 8
    assert rows[("gsm8k", "graft+pred")]["vs_best_fixed"] == pytest.approx(1.5)
    assert rows[("gsm8k", "graft+pred")]["vs_category_best"] == pytest.approx(1.0)
    assert rows[("gsm8k", "graft+pred")]["category_best"] == "ddtree@8"
    assert rows[("alpaca", "graft+pred")]["vs_ar"] == pytest.approx(2.5)
    assert rows[("all", COMPOSITE)]["vs_best_fixed"] == pytest.approx(7.0 / 6.0)  # each at its own: 2 + 4 s
    assert rows[("all", "graft+pred")]["vs_category_best"] is None
    modeled = {(r["category"], r["kind"]): r for r in mix_rows({"gsm8k": math, "alpaca": chat},
                                                               policies=("graft+pred",), time="modeled_speedup")}
    assert modeled[("all", "graft+pred")]["vs_best_fixed"] == pytest.approx(7.0 / 6.0)
    with pytest.raises(GraftError, match="missing"):
        mix_rows({"gsm8k": math, "alpaca": [r for r in chat if r["key"] != "ddtree@8"]})
    with pytest.raises(GraftError, match="no fixed run"):
        mix_rows({"gsm8k": [r for r in math if r["method"] != "ddtree"]})


def test_categories_split_mt_bench_by_turn_and_keep_each_turn_s_own_times():
    turns = [dict(rec(key, "mt-bench/81", s, "mt-bench"), prompt_tokens=9) for key, s in (("ar", 1.0), ("ar", 3.0))]
    two = combine(turns)
    assert two["decode_s"] == 4.0 and two["modeled_s"] == 2.0
    one, second = turn_records(two)
    assert (one["uid"], second["uid"]) == ("mt-bench/81", "mt-bench/81/turn2")
    assert (one["decode_s"], second["decode_s"], second["modeled_s"], second["turn"]) == (1.0, 3.0, 1.5, 1)
    split = categories({"mt-bench": [two], "gsm8k": [rec("ar", "gsm8k/1", 2.0)]})
    assert list(split) == ["gsm8k", "mt-bench turn 1", "mt-bench turn 2"]
    assert split["mt-bench turn 2"][0]["decode_s"] == 3.0 and split["gsm8k"][0]["turn"] == 0


def test_validation_prompts_never_are_the_held_out_ones():
    assert {task for task, _ in CATEGORIES.values()} >= {"gsm8k", "humaneval", "mt-bench", "regular"}
    for task in ("gsm8k", "humaneval", "mt-bench"):
        held = {i.uid for i in load_items(task, "eval", 10)}
        val = {i.uid for i in validation_items(task, 4)}
        assert len(val) == 4 and not (val & held), task
    with pytest.raises(GraftError, match="too few"):
        validation_items("mt-bench", 60)


def test_the_mix_figure_draws_every_policy_with_its_intervals(tmp_path):
    import pandas as pd

    from graftlib.lab.workbook.plots.figures import plot_mix

    math = category("gsm8k", {"ar": 10.0, "ddtree@2": 3.0, "ddtree@8": 2.0, "graft+pred@64": 2.0, "graft@64": 2.5})
    chat = category("alpaca", {"ar": 10.0, "ddtree@2": 4.0, "ddtree@8": 6.0, "graft+pred@64": 4.0, "graft@64": 5.0})
    M = pd.DataFrame(mix_rows({"gsm8k": math, "alpaca": chat}, policies=("graft", "graft+pred")))
    fig = plot_mix(M, "test")
    a, b = fig.axes[:2]
    assert [t.get_text() for t in a.get_xticklabels()] == ["gsm8k", "alpaca", "all"]
    assert len(a.containers) == 3 and len(b.containers) == 3  # graft, graft+pred, the composite: points with bars
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"graft+pred", "graft", COMPOSITE, "goal, pooled: 1.05x", "goal, per category: 0.97x"} <= labels
    fig.savefig(tmp_path / "mix.png")
