"""Modeled throughput: cost profiles as files, pricing a decode's rounds, the modeled
columns, the ranking rule and the modeled-vs-wall-clock validation."""

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib import cli
from graftlib.core.errors import GraftError
from graftlib.inputs.cost_profile import CostProfile, RoundShape, default_profile, from_saba, load_profile
from graftlib.lab.report.metrics import format_table, summarize
from graftlib.lab.report.modeled import format_validation, price, rank, reprice, validate
from graftlib.lab.run.bench import BenchPrompt, BenchSpec, Run, run_bench
from graftlib.methods.decoder import Decoder
from graftlib.methods.saba_params import DEFAULT_PATH, SabaParams
from graftlib.models import Pair

C = [0.1, 0.01, 0.001]  # c0, c1 [s/node], c2 [s/(node x token)]
C_AR = [0.05, 0.0001]
C_DRAFT = 0.02
TABLE = {"1": 0.0, "4": 0.004}


def hand_profile(**overrides) -> CostProfile:
    kw = dict(name="hand", hardware="paper and pencil", c=C, c_ar=C_AR, c_draft=C_DRAFT, cost_table=TABLE,
              fitted_from={"source": "test"})
    return CostProfile(**{**kw, **overrides})


def hand_round(shape: RoundShape) -> float:
    """The module doc's formulas written out: eq. 17 + linear table, AR step, declined round."""
    if shape.budget > 0:
        b, p = shape.nodes, shape.prefix_len
        delta = 0.0 if b <= 1 else 0.004 if b >= 4 else 0.004 * (b - 1) / 3
        return C[0] + C[1] * b + C[2] * b * p + delta
    return C_AR[0] + C_AR[1] * shape.prefix_len + (C_DRAFT if shape.drafted else 0.0)


def test_modeled_time_of_three_rounds_by_hand():
    rounds = [RoundShape(4, 2, 10, True), RoundShape(0, 0, 13, True), RoundShape(0, 0, 14, False)]
    expected = (0.1 + 2 * (0.01 + 0.001 * 10) + 0.004 / 3) + (0.05 + 0.0013 + 0.02) + (0.05 + 0.0014)
    profile = hand_profile()
    assert profile.modeled_seconds(rounds) == pytest.approx(expected, rel=1e-12)
    assert profile.modeled_seconds(rounds) == profile.modeled_seconds(list(rounds))  # deterministic
    assert hand_profile(cost_table=None).drafted_round_s(2, 10) == pytest.approx(0.1 + 2 * (0.01 + 0.001 * 10))


def test_ar_decode_is_tokens_minus_one_ar_steps():
    profile, p, n = hand_profile(), 9, 12
    rows = (n - 1) * p + (n - 1) * (n - 2) / 2
    assert profile.ar_modeled_seconds(p, n) == pytest.approx((n - 1) * 0.05 + 0.0001 * rows)
    assert profile.ar_modeled_seconds(p, 1) == 0.0
    rec = {"uid": "u", "key": "ar", "method": "ar", "prompt_tokens": p, "new_tokens": n}
    assert price(rec, profile)["modeled_s"] == profile.ar_modeled_seconds(p, n)


def test_profile_round_trips_through_its_file(tmp_path):
    profile = hand_profile()
    again = CostProfile.load(profile.save(tmp_path / "p.json"))
    assert again == profile and again.id == profile.id and again.label == {"name": "hand", "id": profile.id}
    assert hand_profile(name="other").id == profile.id  # the id hashes the numbers only
    assert hand_profile(c_draft=0.03).id != profile.id
    shipped = default_profile()
    assert load_profile(None) == shipped and CostProfile.load(shipped.save(tmp_path / "cpu.json")) == shipped
    saba = SabaParams.load(DEFAULT_PATH)
    assert shipped.c == saba.c and shipped.c_ar == saba.c_ar and shipped.cost_table == saba.cost_table
    assert shipped.fitted_from["saba_params"] == saba.id and shipped.hardware == saba.meta["hardware"]
    # the profile prices a drafted round as the calibration's C_t(B) (saba.round_costs)
    from graftlib.methods.saba import round_costs
    assert shipped.drafted_round_s(3, 200) == pytest.approx(float(round_costs(saba, [3], 200)[0]), rel=1e-12)


def test_fit_rows_cost_recovers_the_price_of_a_head_row():
    """Latencies = eq. 17 + table + h (rows - mean rows at B) + noise: the fit finds ref(B) and h (2.5 ms);
    a residual falling with the rows clips h at 0."""
    import numpy as np

    from graftlib.training.graft.saba_fit import fit_rows_cost

    rng = np.random.default_rng(0)
    budgets = np.repeat([2, 8, 32], 200)
    rows = rng.integers(1, 7, size=budgets.size)
    prefixes = rng.integers(50, 300, size=budgets.size)
    delta = {"2": 0.0, "8": 0.001, "32": 0.003}
    ref = {b: rows[budgets == b].mean() for b in (2, 8, 32)}
    base = np.array([C[0] + b * (C[1] + C[2] * p) + delta[str(b)] for b, p in zip(budgets, prefixes)])
    latency = base + 0.0025 * (rows - np.array([ref[b] for b in budgets])) + rng.normal(0, 2e-4, budgets.size)
    with_ar = (list(budgets) + [0], list(prefixes) + [100], list(latency) + [0.05], list(rows) + [1])
    fit = fit_rows_cost(*with_ar, C, delta)
    assert fit["h"] == pytest.approx(0.0025, rel=0.02)
    assert fit["ref"] == {str(b): pytest.approx(ref[b]) for b in (2, 8, 32)}  # the AR step is ignored
    falling = base - 0.0025 * (rows - np.array([ref[b] for b in budgets]))
    assert fit_rows_cost(budgets, prefixes, falling, rows, C, delta)["h"] == 0.0


def test_the_rows_term_prices_what_a_round_accepted(tmp_path):
    """A drafted round pays h per LM-head row beyond the calibration's mean at its budget; unknown rows (0),
    AR steps and a profile without the term price as before; a bench record's rows are its `accepted`."""
    rows_cost = {"h": 0.003, "ref": {"2": 1.5, "8": 2.5}}
    profile, plain = hand_profile(c_rows=rows_cost), hand_profile()
    assert profile.id != plain.id and hand_profile(c_rows=None).id == plain.id
    assert CostProfile.load(profile.save(tmp_path / "p.json")) == profile
    at8 = RoundShape(8, 8, 40, True, rows=4)
    assert profile.round_s(at8) == pytest.approx(plain.round_s(at8) + 0.003 * (4 - 2.5), rel=1e-12)
    at5 = RoundShape(8, 5, 40, True, rows=1)  # ref interpolated at 5 nodes: 1.5 + (5 - 2) / 6
    assert profile.round_s(at5) == pytest.approx(plain.round_s(at5) + 0.003 * (1 - 2.0), rel=1e-12)
    for shape in (RoundShape(8, 8, 40, True), RoundShape(0, 0, 40, True), RoundShape(0, 0, 40, False)):
        assert profile.round_s(shape) == plain.round_s(shape)
    rec = {"uid": "u", "key": "ddtree@8", "method": "ddtree", "prompt_tokens": 40, "new_tokens": 6,
           "round_shapes": [[8, 8, 40, 1], [0, 0, 44, 1]], "accepted": [4, 1]}
    assert price(rec, profile)["modeled_s"] == pytest.approx(profile.round_s(at8) + profile.round_s(RoundShape(0, 0, 44,
                                                                                                               True)))
    assert price({**rec, "accepted": None}, profile)["modeled_s"] == price(rec, plain)["modeled_s"]
    with pytest.raises(GraftError, match="1 accepted counts for 2 round shapes"):
        price({**rec, "accepted": [4]}, profile)
    with pytest.raises(GraftError, match="rows_cost needs h"):
        hand_profile(c_rows={"h": -1.0, "ref": {"2": 1.5}})
    saba = SabaParams.load(DEFAULT_PATH)  # the shipped calibration, with or without its own rows term
    assert from_saba(replace(saba, rows_cost=rows_cost)).c_rows == rows_cost
    assert from_saba(replace(saba, rows_cost=None)).c_rows is None


@pytest.mark.parametrize("content, message", [
    (None, "cost profile file not found"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"name": "x", "hardware": "h", "c": [0.1, 0.0], "c_ar": C_AR, "c_draft": 0.0}), "c needs 3 to 5"),
    (json.dumps({"name": "x", "hardware": "h", "c": C, "c_draft": 0.0}), r"missing keys \['c_ar'\]"),
    (json.dumps({"name": "x", "hardware": "h", "c": C, "c_ar": C_AR, "c_draft": 0.0, "speed": 1}), "unknown keys"),
    (json.dumps({"name": "x", "hardware": "h", "c": C, "c_ar": C_AR, "c_draft": 0.5}), "c_draft must be in"),
    (json.dumps({"name": "x", "hardware": "h", "c": C, "c_ar": ["fast", 0], "c_draft": 0.0}), "c_ar needs 2 finite"),
    (json.dumps({"name": "x", "hardware": "h", "c": C, "c_ar": C_AR, "c_draft": 0.0, "cost_table": {"0": 1.0}}),
     "cost_table maps budgets >= 1"),
    (json.dumps({"name": "x", "hardware": "h", "c": C, "c_ar": C_AR, "c_draft": 0.0, "schema": "v0"}), "schema"),
])
def test_malformed_profile_names_the_file_and_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(GraftError, match=message) as e:
        CostProfile.load(path)
    assert "bad.json" in str(e.value)


def test_a_saba_file_is_not_a_profile_but_converts():
    with pytest.raises(GraftError, match="is a SABA calibration, not a cost profile"):
        CostProfile.load(DEFAULT_PATH)
    with pytest.raises(GraftError, match="no AR step cost"):
        from_saba(SabaParams())


@pytest.fixture(scope="module")
def tiny_pair(one_thread):
    return Pair(tiny_target("qwen3"), SimpleNamespace(eos_token_id=None), tiny_drafter(), False, "tiny-qwen3", "tiny")


def test_a_real_decode_prices_as_its_rounds_by_hand(tiny_pair):
    decoder = Decoder.for_method(tiny_pair.target, tiny_pair.drafter, "ddtree", 4, eos_ids=[])
    res = decoder.decode(random_prompt(3, 9), 6)
    assert 2 <= len(res.rounds) <= 5 and res.rounds[0].prefix_len == 9
    shapes = [RoundShape.of(r) for r in res.rounds]
    assert [s.prefix_len for s in shapes[1:]] == [9 + sum(r.accepted for r in res.rounds[:i + 1])
                                                    for i in range(len(shapes) - 1)]
    assert hand_profile().modeled_seconds(shapes) == pytest.approx(sum(hand_round(s) for s in shapes), rel=1e-12)


def test_rerunning_the_bench_gives_identical_modeled_columns(tiny_pair, tmp_path):
    prompts = [BenchPrompt("custom", f"p{i}", tuple(random_prompt(i, 9))) for i in range(2)]
    runs = [Run("ar", None), Run("dflash", 3), Run("ddtree", 8)]
    profile = hand_profile()
    spec = BenchSpec(20, warmup=False, cost_profile=profile)
    first, second = (run_bench(tiny_pair, prompts, runs, tmp_path / f"{i}.jsonl", spec, progress=False) for i in (1, 2))
    a, b = ({(r["uid"], r["key"]): r for r in recs} for recs in (first, second))
    assert a.keys() == b.keys() and len(a) == 6
    for k in a:
        assert a[k]["modeled_s"] == b[k]["modeled_s"] and a[k]["modeled_tokens_per_s"] == b[k]["modeled_tokens_per_s"]
        assert a[k]["cost_profile"] == profile.label
    assert any(a[k]["decode_s"] != b[k]["decode_s"] for k in a)  # wall clock moves, the model does not
    rows_a, rows_b = summarize(first), summarize(second)
    assert [r["modeled_speedup"] for r in rows_a] == [r["modeled_speedup"] for r in rows_b]
    assert all(r["cost_profile"] == f"hand ({profile.id})" for r in rows_a)
    for rec in first:  # the record's figure is its rounds priced by hand
        if rec["method"] == "ar":
            assert rec["modeled_s"] == profile.ar_modeled_seconds(9, rec["new_tokens"])
        else:
            shapes = [RoundShape.from_list(s) for s in rec["round_shapes"]]
            assert len(shapes) == rec["rounds"] and shapes[0].prefix_len == 9
            assert rec["modeled_s"] == pytest.approx(sum(hand_round(s) for s in shapes), rel=1e-12)
    # the setting id is the same as without a profile: resuming under the default profile decodes
    # nothing, and reprices the records it returns
    again = run_bench(tiny_pair, prompts, runs, tmp_path / "1.jsonl", BenchSpec(20, warmup=False), progress=False)
    assert len(again) == 6 and all(r["cost_profile"] == default_profile().label for r in again)
    assert {k: r["decode_s"] for k, r in a.items()} == {(r["uid"], r["key"]): r["decode_s"] for r in again}


def _rec(uid, key, wall, modeled, new=11, profile=None, task="gsm8k"):
    method = key.partition("@")[0]
    return {"uid": uid, "key": key, "method": method, "budget": None, "new_tokens": new, "decode_s": wall,
            "modeled_s": modeled, "rounds": 10, "accepted_sum": 10, "nodes_sum": 0, "matches_ar": True, "task": task,
            "stage_s": {"draft": 0.0, "tree": 0.0, "verify": 0.0, "commit": 0.0},
            "cost_profile": profile or {"name": "hand", "id": "abc"}}


def test_summarize_has_modeled_columns_paired_per_prompt():
    recs = [_rec("p1", "ar", 1.0, 1.0), _rec("p2", "ar", 3.0, 2.0, new=21),
            _rec("p1", "g@8", 0.9, 0.5), _rec("p2", "g@8", 2.0, 1.5, new=21)]
    rows = {r["key"]: r for r in summarize(recs)}
    assert rows["g@8"]["modeled_tokens_per_s"] == pytest.approx(30 / 2.0)
    assert rows["g@8"]["modeled_speedup"] == pytest.approx((3.0 / 30) / (2.0 / 30))
    assert rows["ar"]["modeled_speedup"] == pytest.approx(1.0) and rows["g@8"]["cost_profile"] == "hand (abc)"
    table = format_table(list(rows.values())).splitlines()
    assert table[0].split()[-3:] == ["m-tok/s", "m-spd", "exact"] and table[3].split()[-3:-1] == ["15.00", "1.50x"]
    assert "cost profile hand (abc)" in table[-1]
    unpriced = summarize([dict(r, modeled_s=None) for r in recs])
    assert all(r["modeled_speedup"] != r["modeled_speedup"] for r in unpriced)  # nan: no modeled figure
    assert format_table(unpriced).splitlines()[2].split()[-3:-1] == ["-", "-"]
    mixed = recs[:3] + [_rec("p2", "g@8", 2.0, 1.5, new=21, profile={"name": "h200", "id": "def"})]
    with pytest.raises(GraftError, match="several cost profiles"):
        summarize(mixed)


def test_reprice_under_another_profile_keeps_the_rounds():
    rec = {"uid": "p", "key": "ddtree@4", "method": "ddtree", "prompt_tokens": 10, "new_tokens": 4,
           "round_shapes": [[4, 2, 10, 1], [0, 0, 13, 1]]}
    cpu, fast = hand_profile(), hand_profile(name="fast", c=[0.01, 0.0, 0.0], c_ar=[0.005, 0.0], c_draft=0.001,
                                            cost_table=None)
    (a,), (b,) = reprice([rec], cpu), reprice([rec], fast)
    assert a["modeled_s"] == pytest.approx(hand_round(RoundShape(4, 2, 10, True)) + hand_round(RoundShape(0, 0, 13,
                                                                                                          True)))
    assert b["modeled_s"] == pytest.approx(0.01 + 0.006) and b["cost_profile"]["name"] == "fast"
    assert b["modeled_tokens_per_s"] == pytest.approx(3 / 0.016)
    assert price({**rec, "round_shapes": None}, cpu)["modeled_s"] is None  # written before round shapes
    with pytest.raises(GraftError, match="round shape must be"):
        price({**rec, "round_shapes": [[4, 2, 10]]}, cpu)


def test_ranking_uses_modeled_inside_the_interval_and_wall_clock_outside():
    a = [_rec(f"p{i}", "ddtree@8", 1.0, 1.0) for i in range(6)]
    # wall clock: b is 0.9-1.1x of a prompt by prompt (noise); the model says b is 5% faster
    noisy = [_rec(f"p{i}", "graft@8", t, 1 / 1.05) for i, t in enumerate([0.85, 1.1, 0.95, 1.12, 0.9, 1.05])]
    r = rank(a + noisy, "ddtree@8", "graft@8")
    assert r.wall_ci[0] <= 1.0 <= r.wall_ci[1] and r.figure == "modeled" and r.faster == "graft@8"
    assert r.modeled_ratio == pytest.approx(1.05) and r.ratio == r.modeled_ratio and r.prompts == 6
    assert "ranked by the modeled figure" in r.caption() and "contains 1.0" in r.caption() and "hand abc" in r.caption()
    # wall clock: b is clearly slower on every prompt, though the model says faster: wall clock ranks
    slow = [_rec(f"p{i}", "graft@8", t, 1 / 1.05) for i, t in enumerate([1.3, 1.35, 1.4, 1.3, 1.32, 1.38])]
    r = rank(a + slow, "ddtree@8", "graft@8")
    assert r.wall_ci[1] < 1.0 and r.figure == "wall-clock" and r.faster == "ddtree@8"
    assert "ranked by the wall-clock figure" in r.caption() and "excludes 1.0" in r.caption()
    # fewer than 3 prompts: no interval, the model ranks
    assert rank(a[:2] + slow[:2], "ddtree@8", "graft@8").figure == "modeled"
    # no modeled figure (records written before round shapes): wall clock, whatever the interval
    r = rank(a + [dict(x, modeled_s=None) for x in noisy], "ddtree@8", "graft@8")
    assert r.figure == "wall-clock" and "contains 1.0" in r.caption() and "no modeled figure" in r.caption()
    with pytest.raises(GraftError, match="no prompt was decoded by both"):
        rank(a, "ddtree@8", "graft@8")


def test_validation_states_the_error_per_method_and_task():
    recs = []
    for task in ("gsm8k", "mbpp"):
        recs += [_rec(f"{task}{i}", "ar", 1.0, 1.0, task=task) for i in range(3)]
        recs += [_rec(f"{task}{i}", "ddtree@8", 0.5, 0.55, task=task) for i in range(3)]  # wall 2.0x, modeled 1.818x
    v = validate(recs)
    assert [(r["task"], r["key"]) for r in v["rows"]] == [("gsm8k", "ddtree@8"), ("mbpp", "ddtree@8")]
    assert v["mae"] == pytest.approx(2.0 - 1 / 0.55) and v["mare"] == pytest.approx((2.0 - 1 / 0.55) / 2.0)
    assert v["cost_profile"] == ["hand abc"]
    text = format_validation(v)
    assert "mean absolute error: 0.182x (9.1% of the wall-clock speedup) over 2 runs x tasks" in text


def test_cli_rejects_a_bad_cost_profile_before_loading_models(tmp_path, capsys):
    bad = tmp_path / "h200.json"
    bad.write_text('{"name": "h200"}')
    assert cli.main(["bench", "--cost-profile", str(bad), "--methods", "ar"]) == 2
    assert "h200.json: missing keys" in capsys.readouterr().err


def test_walked_records_are_ranked_by_the_modeled_figure():
    """A walked run has no wall clock (NaN decode times): the ranking rule decides by the modeled figure, so the best
    budget it picks is the modeled one (a NaN interval once let it pick by nothing)."""
    from graftlib.lab.report.modeled import best_run, order_runs

    recs = [dict(key=k, uid=f"p{i}", new_tokens=33, decode_s=float("nan"), modeled_s=m * (1 + 0.01 * i))
            for i in range(5) for k, m in (("ddtree@8", 1.2), ("ddtree@32", 1.0), ("ddtree@128", 1.5))]
    r = rank(recs, "ddtree@32", "ddtree@128")
    assert r.figure == "modeled" and r.faster == "ddtree@32"
    assert order_runs(recs, ["ddtree@8", "ddtree@32", "ddtree@128"]).keys == ("ddtree@32", "ddtree@8", "ddtree@128")
    assert best_run(recs, ["ddtree@8", "ddtree@32", "ddtree@128"], "rule") == "ddtree@32"
