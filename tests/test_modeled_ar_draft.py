"""The modeled cost of AR-drafted rounds (EAGLE-3's dynamic tree, OPT-Tree): round shapes carry the
drafter forwards and their rows, a profile prices them per forward (`c_ar_draft`) instead of
DFlash's one draft (`c_draft`), refuses them without it, keeps its id without it, and
`graft costs --ar-draft`'s measurement runs on a tiny drafter. No timed assertions."""

import hashlib
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from test_modeled import C_DRAFT, hand_profile, hand_round
from tiny import eagle3_config, exactness_pair, random_eagle3, random_prompt, tiny_drafter, tiny_target

from graftlib import cli
from graftlib.core.errors import GraftError
from graftlib.inputs.cost_profile import (
    AR_DRAFT_PATH,
    CostProfile,
    RoundShape,
    default_profile,
    load_ar_draft_cost,
    saba_profile,
    with_ar_draft,
)
from graftlib.lab.report.modeled import price
from graftlib.lab.run.costs.cost_curves import ar_draft_cost_curve, dflash_draft_cost, fit_ar_draft
from graftlib.methods.decoder import Decoder
from graftlib.models import Pair

E = [0.004, 0.0005]  # e0 [s/forward], e1 [s/row]
pytestmark = pytest.mark.usefixtures("one_thread")


def ar_profile(**overrides) -> CostProfile:
    return hand_profile(**{"c_ar_draft": E, **overrides})


def test_an_ar_drafted_round_pays_its_forwards_instead_of_c_draft():
    profile = ar_profile()
    eagle = RoundShape(10, 10, 20, True, 8, 74)  # EAGLE-3's release: context of 4 pairs, 7 depths x 10 rows
    dflash = RoundShape(10, 10, 20, True)
    assert profile.round_s(eagle) == pytest.approx(hand_round(dflash) - C_DRAFT + 8 * E[0] + 74 * E[1], rel=1e-12)
    assert profile.round_s(eagle) - profile.round_s(dflash) == pytest.approx(8 * E[0] + 74 * E[1] - C_DRAFT)
    declined = RoundShape(0, 0, 20, True, 1, 3)  # drafted by the context step, then run as an AR step
    assert profile.round_s(declined) == pytest.approx(0.05 + 0.0001 * 20 + E[0] + 3 * E[1], rel=1e-12)
    # a DFlash round prices as before, with or without c_ar_draft
    for s in (dflash, RoundShape(0, 0, 13, True), RoundShape(0, 0, 14, False)):
        assert profile.round_s(s) == hand_profile().round_s(s) == pytest.approx(hand_round(s), rel=1e-12)


def test_old_four_field_shapes_load_as_dflash_rounds():
    old = RoundShape.from_list([4, 2, 10, 1])
    assert old == RoundShape(4, 2, 10, True) and old.draft_steps == 0 and not old.ar_drafted
    assert old.to_list() == [4, 2, 10, 1]  # written as before
    ar = RoundShape(4, 2, 10, True, 3, 21)
    assert ar.to_list() == [4, 2, 10, 1, 3, 21] and RoundShape.from_list(ar.to_list()) == ar
    for bad, message in (([4, 2, 10, 1, 3], "round shape must be"), ([4, 2, 10, 1, 3, 2], "draft_rows"),
                         ([4, 2, 10, 1, 0, 5], "draft_rows"), ([0, 0, 10, 0, 1, 1], "drafted")):
        with pytest.raises(GraftError, match=message):
            RoundShape.from_list(bad)


def test_a_profile_without_c_ar_draft_refuses_an_ar_drafted_round(tmp_path):
    old = hand_profile()
    shape = RoundShape(10, 10, 20, True, 8, 74)
    with pytest.raises(GraftError, match=r"cost profile 'hand' .* no AR drafter cost \(c_ar_draft\)") as e:
        old.round_s(shape)
    assert "graft costs --ar-draft --cost-profile PROFILE.json --profile-out NEW.json" in str(e.value)
    rec = {"uid": "p", "key": "eagle3@59", "method": "eagle3", "prompt_tokens": 20, "new_tokens": 5,
           "round_shapes": [shape.to_list()]}
    with pytest.raises(GraftError, match="c_ar_draft"):
        price(rec, old)
    assert price(rec, ar_profile())["modeled_s"] == ar_profile().round_s(shape)
    # an EAGLE-3 record written before its rounds carried their forwards: no modeled figure, not a DFlash price
    assert price({**rec, "round_shapes": [[10, 10, 20, 1]]}, ar_profile())["modeled_s"] is None
    path = old.save(tmp_path / "old.json")
    assert cli.main(["bench", "--cost-profile", str(path), "--methods", "eagle3"]) == 2  # before the models load


def _old_id(p: CostProfile) -> str:
    """The profile id as written before `c_ar_draft` existed."""
    numbers = {"c": p.c, "c_ar": p.c_ar, "c_draft": p.c_draft, "cost_table": p.cost_table}
    return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:12]


def test_profile_id_unchanged_without_c_ar_draft(tmp_path):
    old = hand_profile()
    shipped = replace(saba_profile(), c_rows=None)  # the shipped calibration's profile less its later rows term
    assert old.id == _old_id(old) and shipped.id == _old_id(shipped)
    file = {k: v for k, v in old.to_dict().items() if k != "c_ar_draft"}  # a file written before the field
    (tmp_path / "old.json").write_text(json.dumps(file))
    assert CostProfile.load(tmp_path / "old.json").id == old.id
    new = ar_profile()
    assert new.id != old.id and ar_profile(name="x").id == new.id and ar_profile(c_ar_draft=[0.004, 0.0]).id != new.id
    assert CostProfile.load(new.save(tmp_path / "new.json")) == new
    with pytest.raises(GraftError, match="c_ar_draft needs 2 finite numbers"):
        ar_profile(c_ar_draft=[0.0, 0.001])


def test_the_default_profile_carries_the_shipped_ar_drafter_cost():
    shipped, saba = default_profile(), saba_profile()
    c, provenance = load_ar_draft_cost(AR_DRAFT_PATH)
    assert shipped.c_ar_draft == c and saba.c_ar_draft is None
    assert shipped.fitted_from["c_ar_draft"]["command"].split()[1:4] == ["graft", "costs", "--ar-draft"]
    assert provenance["threads"] == 1 and "drafters/smollm2-135m-eagle3" in provenance["drafter"]
    for s in (RoundShape(8, 8, 100, True), RoundShape(0, 0, 100, True), RoundShape(0, 0, 100, False)):
        assert shipped.round_s(s) == saba.round_s(s)  # DFlash decodes' modeled figures do not move
    assert shipped.round_s(RoundShape(8, 8, 100, True, 8, 74)) > shipped.round_s(RoundShape(8, 8, 100, True))
    assert with_ar_draft(saba, c, provenance) == shipped


@pytest.mark.parametrize("bad, message", [({"c_ar_draft": [0.01, 0.001]}, "schema"),
                                          ({"schema": "graft-ar-draft-cost/1"}, "c_ar_draft needs"),
                                          ({"schema": "graft-ar-draft-cost/1", "c_ar_draft": [0.01, -1]}, "e1 >= 0")])
def test_a_malformed_ar_drafter_cost_file_is_named(tmp_path, bad, message):
    (tmp_path / "ar.json").write_text(json.dumps(bad))
    with pytest.raises(GraftError, match=message) as e:
        load_ar_draft_cost(tmp_path / "ar.json")
    assert "ar.json" in str(e.value)


@pytest.fixture(scope="module")
def eagle3_pair(one_thread):
    target, _ = exactness_pair("qwen3")
    return target, random_eagle3(eagle3_config(target.config), target.config, seed=0)


@pytest.mark.parametrize("method, budget", [("eagle3", 59), ("opt-tree", 8)])
def test_a_real_ar_drafted_decode_prices_its_forwards(eagle3_pair, method, budget):
    target, drafter = eagle3_pair
    res = Decoder.for_method(target, drafter, method, budget, eos_ids=[]).decode(random_prompt(5, 9), 12)
    shapes = [RoundShape.of(r) for r in res.rounds]
    assert len(shapes) >= 2
    for r, s in zip(res.rounds, shapes):
        assert s.draft_steps == len(r.t_draft_steps) == len(r.draft_rows) >= 1 and s.draft_rows == sum(r.draft_rows)
        assert r.draft_rows[0] == (9 if s is shapes[0] else res.rounds[shapes.index(s) - 1].accepted)  # pending pairs
        # the list keeps all but the rows, which a record keeps in its `accepted` list
        assert RoundShape.from_list(s.to_list()) == replace(s, rows=0) and s.rows == r.accepted
    first = res.rounds[0]
    if method == "eagle3":  # EAGLE-2's tree forwards top_k 10 nodes at each of its 7 depths
        assert first.draft_rows == [9] + [10] * 7
    profile = ar_profile()
    by_hand = sum(hand_round(RoundShape(s.budget, s.nodes, s.prefix_len, s.drafted)) - C_DRAFT
                  + s.draft_steps * E[0] + s.draft_rows * E[1] for s in shapes)
    assert profile.modeled_seconds(shapes) == pytest.approx(by_hand, rel=1e-12)
    with pytest.raises(GraftError, match="c_ar_draft"):
        hand_profile().modeled_seconds(shapes)


def test_the_measurement_times_every_width_and_context(eagle3_pair):
    _, drafter = eagle3_pair
    curve = ar_draft_cost_curve(drafter, [1, 3, 10], [1, 2], prefix_len=16, depth=2, repeats=1)
    assert set(curve["context"]) == {1, 2} and set(curve["depth"]) == {1, 3, 10}
    assert all(t > 0 for part in curve.values() for t in part.values())
    fit = fit_ar_draft(curve)
    assert fit["c_ar_draft"][0] > 0 and fit["c_ar_draft"][1] >= 0 and len(fit["points"]) == 5
    cache = drafter.new_cache()
    assert cache.length == 0  # the measurement keeps its own cache
    with pytest.raises(GraftError, match=">= 1"):
        ar_draft_cost_curve(drafter, [0], [1])


def test_the_fit_is_a_line_through_the_medians():
    line = {"context": {1: 0.011, 4: 0.014}, "depth": {1: 0.011, 10: 0.020, 50: 0.060}}
    assert fit_ar_draft(line)["c_ar_draft"] == pytest.approx([0.010, 0.001])
    assert fit_ar_draft(line)["mean_abs_rel_error"] == pytest.approx(0.0, abs=1e-9)
    falling = {"context": {1: 0.02}, "depth": {1: 0.02, 10: 0.01}}  # noise: a negative slope is clamped
    assert fit_ar_draft(falling)["c_ar_draft"] == pytest.approx([0.05 / 3, 0.0])


def test_dflash_draft_step_is_timed_for_comparison(one_thread):
    pair = Pair(tiny_target("qwen3"), SimpleNamespace(eos_token_id=None), tiny_drafter(), False, "tiny-qwen3", "tiny")
    assert dflash_draft_cost(pair, context=3, budget=4, prefix_len=12, repeats=1) > 0
