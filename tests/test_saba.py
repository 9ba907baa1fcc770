"""SABA math (eqs. 14-17), signals, fits, controller behaviour, CaDDTree stopping, and exactness of
ddtree+saba / caddtree against AR on tiny Llama and Qwen3 targets."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from reference_saba import choose, extra_tokens, prefers_ar, prefers_ar_after_draft, round_cost, utility
from tiny import ARCH_SEEDS, tiny_pairs

from graftlib.core.builders import Candidates, FixedBudget, HeapTreeBuilder
from graftlib.core.errors import GraftError
from graftlib.core.paths import portable
from graftlib.inputs.cost_profile import from_saba
from graftlib.methods.caddtree import CaDDTree
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import MethodInputs
from graftlib.methods.saba import (
    BudgetGrid,
    SabaController,
    StateTracker,
    cost,
    degeneration,
    degeneration_from,
    gain,
    round_costs,
)
from graftlib.methods.saba_extensions import GainCorrection, table_correction
from graftlib.methods.saba_params import DEFAULT_PATH, SabaParams, default_params
from graftlib.methods.tdes import TDESNet, TDESScorer
from graftlib.training.graft.saba_fit import (
    INTERCEPT_FLOOR,
    fit_cost,
    fit_cost_table,
    fit_gain,
    fit_gain_table,
    nonneg_lstsq,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def hand_candidates(top1: list[float], hidden: torch.Tensor | None = None) -> Candidates:
    ids = [[1, 2, 3] for _ in top1]
    logq = [[math.log(p), math.log((1 - p) / 2), math.log((1 - p) / 2) - 0.1] for p in top1]
    return Candidates(ids, logq, list(top1), hidden)


# ----------------------------------------------------------------------------- signals (eq. 15)


def test_signals_hand_made():
    # hidden states with known adjacent cosines r = [1, 0, cos 45deg]
    h = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    r = [1.0, 0.0, math.sqrt(0.5)]
    assert degeneration(h) == pytest.approx(sum(r) / 3 + (r[-1] - r[0]), abs=1e-6)
    assert degeneration(None) == 0.0 and degeneration(h[:1]) == 0.0

    tr = StateTracker(window=3, hist_prior=2.5)
    cand = hand_candidates([0.9, 0.5, 0.3, 0.1], h)
    s = tr.signals(cand)
    assert s.tolist() == pytest.approx([0.45, degeneration(h), 2.5, 1.0])  # prior before any round
    for a in (1, 4):
        tr.feedback({"accepted": a})
    assert tr.signals(cand)[2] == pytest.approx(2.5)  # mean of the rounds so far
    for a in (3, 5, 7):
        tr.feedback({"accepted": a})
    assert tr.signals(cand)[2] == pytest.approx(5.0)  # last w = 3 rounds only


def test_signals_from_the_read_back_gram_equal_the_hidden_states():
    """`Candidates.from_top_k` reads the Gram diagonals back with the top-k; SABA's state is the same."""
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(6, 16, generator=g)
    cand = Candidates.from_logits(torch.randn(6, 40, generator=g) * 3, 8, hidden)
    assert cand.hidden_sq is not None and len(cand.hidden_sq) == 6 and len(cand.hidden_dot) == 5
    bare = Candidates(cand.ids, cand.logq, cand.top1_prob, hidden)  # no read-back: from the tensor
    assert StateTracker().signals(cand).tolist() == pytest.approx(StateTracker().signals(bare).tolist(), abs=1e-6)
    # the compiled read of the packed pools and Gram (`packed_signals`) is the Python formula, exactly
    conf = sum(cand.top1_prob) / len(cand.top1_prob)
    assert StateTracker().signal_list(cand)[:2] == [conf, degeneration_from(cand.hidden_sq, cand.hidden_dot)]
    assert cand.gram_table.shape == (6, 6) and bare.gram_table is None


def post_gate_declines(params: SabaParams, choice, prefix_len: int) -> bool:
    return params.c_ar is not None and params.post_gate and 1.0 / (
        params.c_ar[0] + params.c_ar[1] * prefix_len) > choice.after_draft


def test_budget_grid_is_the_reference_utility():
    """The one evaluator (`BudgetGrid.choose`: plain floats, costs precomputed) chooses as the plain
    numpy reference (tests/reference_saba.py) and its utilities gate as the reference's, over models
    with and without gates, cost tables, c3 / c4 and the paper's G / C."""
    rng = np.random.default_rng(1)
    seen, gated, declined = set(), 0, 0
    for params in (SabaParams(), SabaParams(utility="paper"), gated_params([0.015, 1e-5], post_gate=True),
                   gated_params([0.02, 2e-5]), SabaParams(c=[0.05, 1e-3, 1e-6, 4e-3, 2e-5], cost_table={"4": 0.01},
                                                          c_ar=[0.03, 2e-5], grid=[1, 2, 4, 8, 16, 32])):
        grid = np.array(params.grid, dtype=float)
        ev = BudgetGrid(params, grid)
        for _ in range(60):
            s = np.array([rng.uniform(0, 1), rng.uniform(-1, 1), rng.uniform(1, 6), 1.0])
            prefix, k = int(rng.integers(10, 3000)), float(rng.uniform(0.3, 1.5))
            depth = int(rng.choice([3, 15]))
            choice = ev.choose(s.tolist(), prefix, depth, k)
            assert choice.budget == choose(params, grid, s, prefix, depth, k)
            assert choice.utility == pytest.approx(utility(params, grid, s, prefix, depth, k).max(), rel=1e-12)
            assert choice.extra == pytest.approx(extra_tokens(params, [choice.budget], s, depth)[0], rel=1e-9,
                                                 abs=1e-12)
            ar = prefers_ar(params, grid, s, prefix, depth, k)
            assert (params.c_ar is not None and 1.0 / (params.c_ar[0] + params.c_ar[1] * prefix) > choice.utility) == ar
            assert post_gate_declines(params, choice, prefix) == prefers_ar_after_draft(params, grid, s, prefix,
                                                                                         depth, k)
            seen.add(choice.budget)
            gated += ar
            declined += post_gate_declines(params, choice, prefix)
    assert len(seen) > 3 and gated > 0 and declined > 0  # the cases move the choice and both gates fire


def test_budget_grid_reads_gain_tables_as_the_reference():
    """A gain table (the shipped calibration's kind): the grid's pass chooses and predicts as the
    reference, with grid budgets on, between and beyond the table's (the interpolation's knots)."""
    rng = np.random.default_rng(2)
    seen = set()
    for table_b, grid in (((1, 2, 4, 8, 16), [1, 2, 4, 8, 16]), ((2, 4, 16), [1, 2, 3, 4, 6, 12, 16, 24])):
        table = {str(b): [float(x) for x in rng.uniform(-1, 3, 4)] for b in table_b}
        for params in (SabaParams(gain_table=table, grid=grid),
                       SabaParams(gain_table=table, grid=grid, c_ar=[0.03, 2e-5], cost_table={"4": 0.004},
                                  post_gate=True)):
            g = np.array(params.grid, dtype=float)
            ev = SabaController(params).grid
            assert ev.table is not None
            for _ in range(60):
                s = np.array([rng.uniform(0, 1), rng.uniform(-1, 1), rng.uniform(1, 6), 1.0])
                prefix, k, depth = int(rng.integers(10, 3000)), float(rng.uniform(0.3, 1.5)), int(rng.choice([3, 15]))
                choice = ev.choose(s.tolist(), prefix, depth, k)
                assert choice.budget == choose(params, g, s, prefix, depth, k)
                assert post_gate_declines(params, choice, prefix) == prefers_ar_after_draft(params, g, s, prefix,
                                                                                             depth, k)
                assert ev.extras(s.tolist(), depth)[0] == pytest.approx(extra_tokens(params, g, s, depth).tolist(),
                                                                        rel=1e-9, abs=1e-12)
                seen.add(0 if post_gate_declines(params, choice, prefix) else choice.budget)
    assert len(seen) > 3  # the states move the choice


# ----------------------------------------------------------------------------- model (eqs. 14, 16, 17)


def test_gain_cost_utility_math():
    b = np.array([1, 4, 16, 64])
    assert gain(b, 8.0) == pytest.approx(1 - np.exp(-b / 8.0))
    assert cost(b, 100, [0.05, 1e-3, 1e-5]) == pytest.approx(0.05 + b * (1e-3 + 1e-5 * 100))
    p = SabaParams(phi=[0, 0, 0, 8.0], alpha=[0, 0, 0, 3.0], c=[0.05, 1e-3, 1e-5], grid=[1, 4, 16, 64])
    s = [0.5, 0.2, 2.0, 1.0]
    u = (1 + 3 * gain(b, 8.0)) / cost(b, 100, p.c)
    choice = BudgetGrid(p, b).choose(s, 100, None)
    assert choice.utility == pytest.approx(u.max()) and choice.budget == b[np.argmax(u)]
    assert choice.extra == pytest.approx(3 * gain(b, 8.0)[np.argmax(u)])
    paper = SabaParams(**{**p.__dict__, "utility": "paper"})
    assert BudgetGrid(paper, b).choose(s, 100, None).utility == pytest.approx((gain(b, 8.0) / cost(b, 100, p.c)).max())
    # lambda is clamped to lam_min; A_t to [0, D]
    neg = SabaParams(phi=[0, 0, 0, -5.0], alpha=[0, 0, 0, 100.0], c=p.c, grid=p.grid)
    assert BudgetGrid(neg, b).extras(s, 7)[0] == pytest.approx(np.minimum(7 * gain(b, neg.lam_min), b))  # <= B


def test_controller_small_when_steep_large_when_flat():
    cand = hand_candidates([0.6] * 7, torch.randn(7, 16))
    base = dict(phi=[0, 0, 0, 16.0], alpha=[0, 0, 0, 5.0], grid=[1, 2, 4, 8, 16, 32, 64, 128])
    steep = SabaController(SabaParams(c=[0.01, 5e-3, 1e-5], **base))
    flat = SabaController(SabaParams(c=[0.05, 1e-5, 0.0], **base))
    b_steep, b_flat = steep.budget(cand, 200), flat.budget(cand, 200)
    assert b_steep <= 4 and b_flat >= 32, (b_steep, b_flat)
    # a longer prefix makes nodes dearer (c2 term): never a larger budget
    assert steep.budget(cand, 4000) <= b_steep
    # cap trims the grid; max_budget follows it
    capped = SabaController(SabaParams(c=[0.05, 1e-5, 0.0], **base), cap=16)
    assert capped.max_budget == 16 and capped.budget(cand, 200) == 16


def test_params_roundtrip_and_errors(tmp_path, monkeypatch):
    p = SabaParams(phi=[1, 2, 3, 4], meta={"source": "test"})
    path = p.save(tmp_path / "p.json")
    q = SabaParams.load(path)
    assert q.id == p.id and q.meta["path"] == portable(path)
    monkeypatch.setenv("GRAFT_SABA_PARAMS", str(path))
    assert default_params().id == p.id
    with pytest.raises(GraftError, match="not found"):
        SabaParams.load(tmp_path / "missing.json")
    with pytest.raises(GraftError, match="4 entries"):
        SabaParams(phi=[1.0])
    with pytest.raises(GraftError, match="utility"):
        SabaParams(utility="max")


def test_shipped_calibration_keeps_its_recorded_id():
    """The id saved in the shipped JSON is the one it loads with: results name calibrations by it,
    so a field added to SabaParams must not change the id of files written before it."""
    stored = json.loads(DEFAULT_PATH.read_text())["id"]
    assert SabaParams.load(DEFAULT_PATH).id == stored


# ----------------------------------------------------------------------------- fits


def test_fit_cost_recovers_known_c():
    rng = np.random.default_rng(0)
    c = [0.04, 2e-3, 3e-6]
    b = np.repeat([1, 2, 4, 8, 16, 32, 64], 4)
    p = np.tile([64, 128, 256, 512], 7)
    y = cost(b, 0, [c[0], c[1], 0]) + c[2] * b * p + rng.normal(0, 1e-5, len(b))
    got, c_ar, r2 = fit_cost(b, p, y, concave=False, shared_prefix=False)
    assert got == pytest.approx(c, rel=0.05) and r2 > 0.999 and c_ar is None
    with pytest.raises(GraftError, match="at least 3"):
        fit_cost([1, 1], [5, 5], [0.1, 0.1])


def test_fit_cost_never_makes_nodes_cheaper_with_prefix():
    """Timings whose unconstrained fit has c2 < 0 (per-node cost falling with the prefix) get c2 = 0
    and the best fit of (c0, c1) instead."""
    b = np.repeat([1, 8, 32, 64], 3).astype(float)
    p = np.tile([100, 200, 400], 4).astype(float)
    y = 0.05 + 2e-3 * b - 1e-6 * b * p
    x = np.stack([np.ones_like(b), b, b * p], axis=1)
    assert np.linalg.lstsq(x, y, rcond=None)[0][2] < 0
    got, _, _ = fit_cost(b, p, y, concave=False, shared_prefix=False)
    assert min(got) >= 0 and got[2] == 0.0
    want = np.linalg.lstsq(x[:, :2], y, rcond=None)[0]
    assert got[:2] == pytest.approx(want.tolist())
    assert cost(np.array([64.0]), 10_000, got)[0] > cost(np.array([1.0]), 10_000, got)[0]


def test_fit_cost_concave_term():
    """A CPU-like concave curve (c3 log2(1 + B)) is recovered; the line through it misprices
    the step from B = 1 to 8 that the argmax weighs; CaDDTree prices nodes with the same model."""
    rng = np.random.default_rng(2)
    c = [0.06, 1.2e-3, 1e-6, 8e-3]
    b = np.repeat([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], 4)
    p = np.tile([64, 128, 256, 512], 12)
    y = cost(b, 0, [c[0], c[1], 0, c[3]]) + c[2] * b * p + rng.normal(0, 1e-5, len(b))
    got, _, r2 = fit_cost(b, p, y, shared_prefix=False)
    assert got == pytest.approx(c, rel=0.05) and r2 > 0.999
    line, _, _ = fit_cost(b, p, y, concave=False, shared_prefix=False)
    step = lambda cc: float(np.diff(cost(np.array([1.0, 8.0]), 256, cc))[0])
    assert step(got) == pytest.approx(step(c), rel=0.02) and step(line) < 0.7 * step(c)
    assert cost(np.array([3.0]), 256, c)[0] == pytest.approx(round_cost(3, 256, c))
    rule = CaDDTree.from_params(SabaParams(c=c), cap=8)
    assert rule.round_costs(300)[5] == pytest.approx(round_cost(5, 300, c))
    with pytest.raises(GraftError, match="3 to 5 entries"):
        SabaParams(c=[0.1, 0.2])


def test_fit_cost_shared_prefix_term():
    """Rounds and AR steps (B = 0) whose latencies share a prefix slope: the joint fit recovers c4
    as both the rounds' and the AR step's slope, so the gap between a one-node round and an AR step
    stays the same at every prefix; a fit without the shared term gives the slope to the AR step
    alone and prices the round below the AR step at long prefixes."""
    rng = np.random.default_rng(4)
    c, a0 = [0.06, 1e-3, 1e-6, 0.01, 3e-5], 0.045
    b = np.repeat([0, 1, 2, 4, 8, 16], 30)
    p = rng.uniform(50, 350, len(b))
    y = np.where(b > 0, [round_cost(int(bb), pp, c) for bb, pp in zip(b, p)], a0 + c[4] * p)
    y = y + rng.normal(0, 1e-5, len(b))
    got, c_ar, r2 = fit_cost(b, p, y)
    assert got == pytest.approx(c, rel=0.05, abs=2e-7) and c_ar == pytest.approx([a0, c[4]], rel=0.05) and r2 > 0.999
    gap = lambda cc, ar, pp: round_cost(1, pp, cc) - (ar[0] + ar[1] * pp)
    assert gap(got, c_ar, 1500) == pytest.approx(gap(got, c_ar, 100), abs=2e-3) and gap(got, c_ar, 1500) > 0
    alone, ar_alone, _ = fit_cost(b, p, y, shared_prefix=False)
    assert len(alone) == 4 and ar_alone[1] == pytest.approx(c[4], rel=0.05)
    assert cost(np.array([1.0, 4.0]), 200, got) == pytest.approx([round_cost(1, 200, got), round_cost(4, 200, got)])


def test_fit_cost_keeps_the_intercepts_positive():
    """Timings at a few short prefixes that a pure prefix slope explains (true a0 = c0 = 0, as the
    tiny pair's noisy CPU steps can look): the fit keeps c0, a0 at INTERCEPT_FLOOR of the fastest
    step instead of 0, so the profile made from it loads (CI once failed on exactly this), and the
    slopes stay close to the truth."""
    b = np.repeat([0, 1, 2, 4, 8], 6).astype(float)
    p = np.tile([40, 60, 80, 100, 120, 140], 5).astype(float)
    y = 2e-5 * p + 1e-4 * b
    got, c_ar, _ = fit_cost(b, p, y)
    assert got[0] == pytest.approx(INTERCEPT_FLOOR * y[b > 0].min())
    assert c_ar[0] == pytest.approx(INTERCEPT_FLOOR * y[b == 0].min()) and c_ar[0] > 0
    assert got[4] == pytest.approx(2e-5, rel=0.05) and got[1] == pytest.approx(1e-4, rel=0.1)
    params = SabaParams(c=got, c_ar=c_ar, c_draft=0.0)
    assert from_saba(params, name="tiny").c_ar[0] > 0
    x = np.stack([np.ones_like(b), b], axis=1)
    assert nonneg_lstsq(x, x @ np.array([0.3, 0.0]), lower=np.array([0.5, 0.0])) == pytest.approx([0.5, 0.0])


def test_cost_table_captures_a_kernel_step(tmp_path):
    """Latencies with a step the smooth eq. 17 cannot follow (B = 2 nearly free over B = 1, +12 ms at
    B = 3, as the embedded target's verify on this CPU): the table's medians recover the step at
    every prefix, stay non-decreasing in B, survive a save/load, interpolate linearly between its
    budgets, are flat beyond them; CaDDTree and the controller price rounds with them."""
    rng = np.random.default_rng(5)
    step = {1: 0.0, 2: 0.001, 3: 0.013, 4: 0.014, 8: 0.022, 16: 0.035}
    b = np.repeat(list(step), 40)
    p = rng.uniform(50, 350, len(b))
    y = 0.05 + np.array([step[int(bb)] for bb in b]) + 3e-5 * p + rng.normal(0, 5e-4, len(b))
    y[::17] += 0.05  # timing outliers: the medians ignore them
    c, _, _ = fit_cost(b, p, y)
    table = fit_cost_table(b, p, y, c)
    params = SabaParams(c=c, cost_table=table, grid=sorted(step))
    for pp in (60, 300):
        want = 0.05 + np.array(list(step.values())) + 3e-5 * pp
        assert round_costs(params, np.array(list(step), dtype=float), pp) == pytest.approx(want, abs=1.5e-3)
    smooth_err = np.abs(cost(np.array([2.0, 3.0]), 200, c) - (0.05 + np.array([0.001, 0.013]) + 3e-5 * 200))
    assert smooth_err.max() > 3e-3  # eq. 17 alone misprices the step
    assert np.all(np.diff(cost(np.array(sorted(step), dtype=float), 0, c) + table_correction(params.cost_table,
                                                                                             sorted(step))) >= 0)
    again = SabaParams.load(params.save(tmp_path / "p.json"))
    assert again.cost_table == table and again.id == params.id != replace(params, cost_table=None).id
    mid = table_correction(params.cost_table, [6.0])[0]
    assert mid == pytest.approx((table["4"] + table["8"]) / 2)
    assert table_correction(params.cost_table, [64.0])[0] == pytest.approx(table["16"])
    assert table_correction(None, [3.0])[0] == 0.0
    rule = CaDDTree.from_params(params, cap=16)
    assert rule.round_costs(200)[3] == pytest.approx(float(round_costs(params, [3], 200)[0]))
    # a step the smooth model hides changes the choice: with B = 2 ~free over B = 1, 2 wins
    flat = SabaParams(c=[0.05, 0.0, 0.0], grid=[1, 2, 3], gain_table={"1": [0, 0, 0, 1.3], "2": [0, 0, 0, 1.42],
                                                                      "3": [0, 0, 0, 1.5]})
    s = [0.5, 1.0, 1.5, 1.0]
    pricey = replace(flat, c=[0.05, 0.0, 0.0, 0.01])  # log2(1 + B): B = 2 costs 5.8 ms more than B = 1
    assert SabaController(pricey).grid.choose(s, 100, None).budget == 1
    tabled = replace(pricey, cost_table={"1": 0.0, "2": -0.0048, "3": 0.01})
    assert SabaController(tabled).grid.choose(s, 100, None).budget == 2
    with pytest.raises(GraftError, match="cost_table"):
        SabaParams(cost_table={"0": 0.01})


def test_gain_table_fit_and_prediction(tmp_path):
    """Per-budget least squares recovers w_B; predictions are non-decreasing in B, interpolated on
    log2 B between table budgets, flat beyond them, clipped to [0, D] extra tokens; the controller,
    the correction and the gates read the same numbers."""
    rng = np.random.default_rng(3)
    w = {1: [0.5, 0.0, 0.1, 1.0], 4: [0.9, 0.0, 0.2, 1.0], 16: [1.2, 0.1, 0.3, 1.0]}
    states, budgets, acc = [], [], []
    for b, wb in w.items():
        s = np.stack([rng.uniform(0, 1, 40), rng.uniform(0, 1, 40), rng.uniform(1, 3, 40), np.ones(40)], 1)
        states += s.tolist(); budgets += [b] * 40; acc += (s @ wb + rng.normal(0, 1e-3, 40)).tolist()
    table, rmse = fit_gain_table(states, budgets, acc)
    assert rmse < 0.01 and sorted(table) == ["1", "16", "4"]
    for b, wb in w.items():
        assert table[str(b)] == pytest.approx(wb, abs=0.01)
    params = SabaParams(gain_table=table, grid=[1, 2, 4, 16, 64])
    s = [0.5, 0.5, 2.0, 1.0]
    a = dict(zip((1, 2, 4, 16, 64), (1 + e for e in BudgetGrid(params, [1, 2, 4, 16, 64]).extras(s, None)[0])))
    assert a[1] == pytest.approx(np.dot(w[1], s), abs=0.02) and a[16] == pytest.approx(np.dot(w[16], s), abs=0.02)
    assert a[2] == pytest.approx((a[1] + a[4]) / 2, abs=1e-6) and a[64] == a[16]  # log2 midpoint; flat beyond
    dipping = SabaParams(gain_table={"1": [0, 0, 0, 2.0], "2": [0, 0, 0, 1.5], "4": [0, 0, 0, 3.0]})
    assert BudgetGrid(dipping, [1, 2, 4]).extras(s, None)[0] == [1.0, 1.0, 2.0]  # running max
    assert BudgetGrid(dipping, [4]).extras(s, 1)[0] == [1.0]  # clipped to D
    choice = SabaController(params).grid.choose(s, 100, None)
    assert choice.budget in (1, 2, 4, 16) and choice.extra == pytest.approx(a[choice.budget] - 1)
    with pytest.raises(GraftError, match="throughput"):
        SabaParams(gain_table=table, utility="paper")
    with pytest.raises(GraftError, match="4 weights"):
        SabaParams(gain_table={"4": [1.0, 2.0]})
    again = SabaParams.load(params.save(tmp_path / "p.json"))
    assert again.id == params.id and again.gain_table == params.gain_table


def test_fit_gain_recovers_known_phi():
    rng = np.random.default_rng(1)
    n = 120
    s = np.stack([rng.uniform(0, 1, n), rng.uniform(0, 1, n), rng.uniform(1, 6, n), np.ones(n)], 1)
    phi, alpha = np.array([6.0, 3.0, 1.5, 2.0]), np.array([3.0, 1.0, 0.5, 0.5])
    grid = np.array([1, 2, 4, 8, 16, 32, 64])
    states = np.repeat(s, len(grid), 0)
    budgets = np.tile(grid, n)
    lam, sat = states @ phi, states @ alpha
    acc = 1 + sat * (1 - np.exp(-budgets / lam)) + rng.normal(0, 0.01, len(budgets))
    got_phi, got_alpha, rmse = fit_gain(states, budgets, acc)
    assert got_phi == pytest.approx(phi.tolist(), rel=0.05, abs=0.05)
    assert got_alpha == pytest.approx(alpha.tolist(), rel=0.05, abs=0.05)
    assert rmse < 0.02


# ----------------------------------------------------------------------------- CaDDTree


def test_caddtree_stops_at_ratio_peak():
    g = torch.Generator().manual_seed(3)
    cand = Candidates.from_logits(torch.randn(7, 32, generator=g) * 3.0, 64)
    cap = 64
    full = HeapTreeBuilder().build(0, cand, cap)  # pop order = insertion order
    probs = np.exp(full.scores[1:])

    def convex(n, prefix):
        return 0.02 + 1e-4 * prefix + 2e-4 * n + 3e-5 * n * n

    for prefix, delta in ((10, 0.0), (300, 0.0), (10, 1.0)):
        ratios = [(1 + probs[:n].sum() + delta) / convex(n, prefix) for n in range(cap + 1)]
        peak = int(np.argmax(ratios))
        rule = CaDDTree(lambda p: [convex(n, p) for n in range(cap + 1)], cap, delta)
        assert rule.budget(cand, prefix) == cap
        tree = rule.build(0, cand, cap)
        assert tree.num_nodes == peak, (prefix, delta, tree.num_nodes, peak)
        ref = HeapTreeBuilder().build(0, cand, peak)
        assert (tree.tokens, tree.parents) == (ref.tokens, ref.parents)
    assert 0 < CaDDTree(lambda p: [convex(n, p) for n in range(cap + 1)], cap).build(0, cand, cap).num_nodes < cap
    # flat cost: the ratio keeps increasing, so the cap binds
    assert CaDDTree(lambda p: [1.0] * 21, 20).build(0, cand, 20).num_nodes == 20


def tdes_heap(vocab: int, depth: int, seed: int = 0) -> HeapTreeBuilder:
    """A TDES-ranked heap (eq. 13) from a random scorer: GRAFT's heap without a trained scorer."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the net's own initialization
    net = TDESNet(torch.randn(vocab, 16, generator=g), 4, depth)
    with torch.no_grad():
        net.u.normal_(generator=g)
    return TDESScorer.from_net(net, 1.0).builder(depth)


def test_graft_stop_cuts_its_own_heap_and_keeps_sabas_gates():
    """graft+stop's rule cuts GRAFT's TDES-ranked heap (not DDTree's) at the ratio peak of that heap's pops; its
    gate is SABA's: a calibration whose AR step is far faster than any round turns a drafted round into one AR
    step (budget 0), one whose AR step is slow never does."""
    g = torch.Generator().manual_seed(5)
    cand = Candidates.from_logits(torch.randn(7, 32, generator=g) * 3.0, 64)
    heap, cap = tdes_heap(32, 7), 64
    params = gated_params([10.0, 0.0], post_gate=True)
    rule = CaDDTree.from_params(params, cap=cap, heap=heap, gated=True, name="graft+stop")
    full = heap.build(0, cand, cap)
    costs = rule.round_costs(10)
    ratios = [(1 + np.exp(full.scores[1:n + 1]).sum()) / costs[n] for n in range(cap + 1)]
    rule.reset()
    assert rule.budget(cand, 10) == cap
    tree = rule.build(0, cand, cap)
    ref = heap.build(0, cand, tree.num_nodes)
    assert (tree.tokens, tree.parents) == (ref.tokens, ref.parents)
    first_drop = next((n for n in range(cap) if ratios[n + 1] <= ratios[n]), cap)  # the rule: R's first peak
    assert 0 < tree.num_nodes == first_drop < cap
    plain = HeapTreeBuilder().build(0, cand, cap)
    assert (full.tokens, full.parents) != (plain.tokens, plain.parents)  # the scorer reorders the pops
    fast = CaDDTree.from_params(gated_params([1e-5, 0.0], post_gate=True), cap=cap, heap=heap, gated=True)
    fast.reset()
    assert fast.budget(cand, 10) == 0


# ----------------------------------------------------------------------------- exactness


ARCHS = ARCH_SEEDS
MAX_NEW = 37


@pytest.fixture(scope="module")
def pairs():
    return tiny_pairs((1, 9, 23), MAX_NEW)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,budget", [("ddtree+saba", 64), ("ddtree+saba", 3), ("caddtree", 64),
                                           ("caddtree", 2)])
def test_exact_vs_ar(pairs, arch, method, budget, monkeypatch):
    monkeypatch.delenv("GRAFT_SABA_PARAMS", raising=False)
    target, drafter, prompts, ar = pairs[arch]
    shipped = replace(default_params(), meta={})  # the shipped numbers, without the pair they belong to
    for p, ref in zip(prompts, ar):
        dec = Decoder.for_method(target, drafter, method, budget, inputs=MethodInputs(saba=shipped))
        res = dec.decode(p, MAX_NEW, record_trees=True)
        assert res.tokens == ref, f"{arch} {method}@{budget}: differs from AR"
        # a SABA gate's AR step (budget 0), or a CaDDTree tree that stops at its root: one token, no drafts
        assert all(1 <= r.nodes <= budget or (r.nodes, r.accepted) == (0, 1) for r in res.rounds)


def test_censored_flag_marks_walks_that_end_at_a_leaf(pairs):
    """`RoundRecord.censored` is exactly "the last accepted node has no child in the verified tree"; a
    1-node tree's round is censored when its one node is accepted (a_t = 2)."""
    target, drafter, prompts, _ = pairs["llama"]
    seen = set()
    for budget in (1, 4, 16):
        dec = Decoder(target, drafter, HeapTreeBuilder(), FixedBudget(budget))
        for p in prompts:
            for r in dec.decode(p, MAX_NEW, record_trees=True).rounds:
                leaf = r.accepted_nodes[-1] not in r.tree["parents"]
                assert r.censored == leaf
                if budget == 1:
                    assert r.censored == (r.accepted == 2)
                seen.add(r.censored)
    assert seen == {True, False}


def test_censored_rounds_count_at_their_expected_length():
    """hist_t averages a*_t: a censored round's a_t plus the draft's forecast beyond its depth,
    sum_{d > d*} prod_{j = d*+1..d} q_j (the last draft's top-1 probabilities); other rounds' a_t."""
    tr = StateTracker(window=4)
    tr.signal_list(hand_candidates([0.9, 0.8, 0.5, 0.25]))
    assert tr.beyond(1) == pytest.approx(0.8 + 0.8 * 0.5 + 0.8 * 0.5 * 0.25)
    assert tr.beyond(4) == 0.0  # the block's last depth: nothing beyond
    tr.feedback({"accepted": 2, "budget": 1, "censored": True})
    tr.feedback({"accepted": 2, "budget": 4, "censored": False})
    tr.feedback({"accepted": 5, "budget": 4, "censored": True})  # the whole block: nothing to add
    assert list(tr.history) == pytest.approx([2 + 0.8 + 0.4 + 0.1, 2, 5])


def test_a_run_of_confident_censored_rounds_grows_the_tree():
    """The gain table's weight on hist_t grows with B: with a sure drafter (q = 0.99 at every depth),
    rounds that accept all they verified lift hist_t towards 1 + D and the budget to the grid's top at
    the next round; read as plain a_t, the same rounds grow the tree one step at a time at best."""
    table = {"1": [0, 0, 0.2, 1.3], "2": [0, 0, 0.4, 1.1], "4": [0, 0, 0.6, 0.9], "8": [0, 0, 0.8, 0.7],
             "16": [0, 0, 1.0, 0.5]}
    params = SabaParams(gain_table=table, c=[0.05, 0.003, 0.0], grid=[1, 2, 4, 8, 16], hist_prior=2.0,
                        gain_prior=None)
    cand = hand_candidates([0.99] * 15)
    budgets = {}
    for censored in (True, False):
        ctl = SabaController(params)
        chosen = []
        for _ in range(6):
            b = ctl.budget(cand, 100)
            chosen.append(b)
            ctl.feedback({"accepted": b + 1, "budget": b, "censored": censored})
        budgets[censored] = chosen
    assert budgets[True][0] == budgets[False][0] == 2  # the prior's choice
    assert budgets[True][1:] == [16] * 5 and 16 not in budgets[False], budgets


def test_saba_budgets_vary_with_state(pairs):
    """With lambda_t = 4 hist_t the controller's budget follows the acceptance history."""
    target, drafter, prompts, _ = pairs["llama"]
    params = SabaParams(phi=[0, 0, 4.0, 0], alpha=[0, 0, 0, 4.0], c=[0.01, 1e-3, 0.0], grid=[1, 2, 4, 8, 16, 32])
    dec = Decoder(target, drafter, HeapTreeBuilder(), SabaController(params))
    res = dec.decode(prompts[1], MAX_NEW)
    assert len({r.budget for r in res.rounds}) > 1


def gated_params(c_ar: list[float], max_skip: int = 4, post_gate: bool = False) -> SabaParams:
    return SabaParams(phi=[0, 0, 0, 4.0], alpha=[0, 0, 0, 2.0], c=[0.05, 1e-3, 0.0], grid=[1, 2, 4, 8],
                      c_ar=c_ar, max_skip=max_skip, post_gate=post_gate, c_draft=0.01)


def test_gate_schedule_skips_double_then_probe():
    """AR always wins: the first round drafts (no state yet), then AR runs of 1, 2, 4, 4 between probes."""
    ctl = SabaController(gated_params([1e-4, 0.0], max_skip=4))
    pattern = []
    for _ in range(20):
        go = ctl.speculate(100)
        pattern.append(int(go))
        if go:
            ctl.budget(hand_candidates([0.5, 0.4, 0.3]), 100)
        ctl.feedback({"accepted": 2 if go else 1, "budget": 1 if go else 0})
    assert pattern == [1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert list(ctl.tracker.history) == [2] * 5  # hist_t counts drafted rounds only
    never = SabaController(gated_params([10.0, 0.0]))  # an AR step slower than any round: always draft
    for _ in range(5):
        assert never.speculate(100)
        never.budget(hand_candidates([0.5, 0.4, 0.3]), 100)
    assert SabaController(gated_params(None)).params.c_ar is None


def test_gain_correction_math():
    corr = GainCorrection(8.0)
    assert corr.k == 1.0
    corr.add(4.0, 3)  # predicted 4 extra tokens, realized 2
    assert corr.k == pytest.approx((8 + 2) / (8 + 4))
    corr.add(0.5, 9)  # realized above prediction raises k past 1
    assert corr.k == pytest.approx((8 + 10) / (8 + 4.5)) and corr.k > 1
    off = GainCorrection(None)
    off.add(4.0, 1)
    assert off.k == 1.0
    assert BudgetGrid(gated_params(None), [8]).extras([0.0, 0.0, 0.0, 1.0],
                                                      None)[0] == pytest.approx([2 * (1 - math.exp(-2))])


def test_gate_learns_from_overpredicted_rounds():
    """The model expects 1.73 extra tokens at B = 8 (U = 47/s > an AR step's 40/s); the rounds accept
    none. With the online correction the gate turns to AR steps after a few rounds; without it,
    it keeps drafting."""
    outcomes = {}
    for prior in (8.0, None):
        ctl = SabaController(replace(gated_params([0.025, 0.0]), gain_prior=prior))
        pattern = []
        for _ in range(8):
            go = ctl.speculate(100)
            pattern.append(int(go))
            if go:
                ctl.budget(hand_candidates([0.5, 0.4, 0.3]), 100)
            ctl.feedback({"accepted": 1, "budget": 8 if go else 0})
        outcomes[prior] = pattern
    assert outcomes[None] == [1] * 8
    assert outcomes[8.0][:2] == [1, 1] and outcomes[8.0][2:].count(0) >= 4


class ContextCheckingDecoder(Decoder):
    """Asserts at every draft that the drafter has seen every committed position's features."""

    def draft(self, st, k):
        cand = super().draft(st, k)
        assert st.draft_cache.keys[0].shape[2] == st.start, "drafter context misses positions"
        assert st.features.shape[1] == 0
        return cand


def test_post_gate_weighs_the_remaining_cost():
    """s_t = bias only: 1 + 2 G(B) expected tokens, G = 1 - exp(-B / 4). The best round (B = 8: 2.73
    tokens in 58 ms) loses to an AR step of 20 ms before the draft (47 vs 50 tokens/s) but wins once
    its 10 ms draft is sunk (57/s); an AR step of 15 ms (67/s) beats it either way."""
    s = [0.0, 0.0, 0.0, 1.0]
    slow, fast = gated_params([0.020, 0.0], post_gate=True), gated_params([0.015, 0.0], post_gate=True)
    choice = BudgetGrid(slow, slow.grid).choose(s, 100, None)  # the same model: only c_ar differs
    assert choice.budget == 8 and choice.utility == pytest.approx(47.06, abs=0.01)
    assert choice.after_draft == pytest.approx(56.86, abs=0.01)
    assert 1 / 0.020 > choice.utility and not post_gate_declines(slow, choice, 100)
    assert 1 / 0.015 > choice.utility and post_gate_declines(fast, choice, 100)
    assert not post_gate_declines(replace(fast, post_gate=False), choice, 100)
    assert not post_gate_declines(replace(fast, c_ar=None), choice, 100)
    ctl = SabaController(fast)
    assert ctl.speculate(100)  # no state yet: draft, then decline with this round's state
    assert ctl.budget(hand_candidates([0.5, 0.4, 0.3]), 100) == 0
    ctl.feedback({"accepted": 1, "budget": 0})
    assert not ctl.speculate(101) and list(ctl.tracker.history) == []
    with pytest.raises(GraftError, match="c_draft"):
        replace(fast, c_draft=1.0)


@pytest.mark.parametrize("arch", ARCHS)
def test_gated_decode_exact_and_context_complete(pairs, arch):
    """Pre-draft gate (AR steps without a draft), post-draft gate (AR steps after a draft) and no
    gate: the tokens equal AR's and the drafter sees every committed position."""
    target, drafter, prompts, ar = pairs[arch]
    for c_ar, post, expect_ar in (([1e-4, 0.0], False, True), ([1e-4, 0.0], True, True),
                                  ([10.0, 0.0], True, False)):
        for p, ref in zip(prompts, ar):
            ctl = SabaController(gated_params(c_ar, post_gate=post))
            res = ContextCheckingDecoder(target, drafter, HeapTreeBuilder(), ctl).decode(p, MAX_NEW)
            assert res.tokens == ref, f"{arch} gate {c_ar} post {post}: differs from AR"
            ar_rounds = [r for r in res.rounds if r.budget == 0]
            assert all(r.accepted == 1 and r.nodes == 0 for r in ar_rounds)
            assert bool(ar_rounds) == expect_ar or len(res.rounds) < 2
            drafted_ar = [r for r in ar_rounds if r.t_draft > 0]  # declined by the post-draft gate
            assert bool(drafted_ar) == (post and expect_ar) or len(res.rounds) < 2


@pytest.mark.parametrize("arch", ARCHS)
def test_graft_stop_decode_exact_with_its_gates(pairs, arch):
    """graft+stop (the stop on a TDES-ranked heap, SABA's gates) equals AR with and without AR steps, and the
    drafter sees every committed position."""
    target, drafter, prompts, ar = pairs[arch]
    heap = tdes_heap(target.config.vocab_size, drafter.block_size - 1)
    for c_ar, post, expect_ar in (([1e-4, 0.0], True, True), ([10.0, 0.0], True, False)):
        for p, ref in zip(prompts, ar):
            rule = CaDDTree.from_params(gated_params(c_ar, post_gate=post), cap=64, heap=heap, gated=True)
            res = ContextCheckingDecoder(target, drafter, rule, rule).decode(p, MAX_NEW)
            assert res.tokens == ref, f"{arch} graft+stop gate {c_ar}: differs from AR"
            assert all(r.nodes <= 64 for r in res.rounds)
            ar_rounds = [r for r in res.rounds if r.budget == 0]
            assert all(r.accepted == 1 and r.nodes == 0 for r in ar_rounds)
            assert bool(ar_rounds) == expect_ar or len(res.rounds) < 2


def test_decoder_reuse_starts_each_decode_afresh(pairs):
    """One Decoder, two prompts, then the first again: the repeat chooses the same budgets and gates as
    the first decode (the controller's history, gate schedule and correction do not cross decodes)."""
    target, drafter, prompts, _ = pairs["llama"]
    dec = Decoder(target, drafter, HeapTreeBuilder(), SabaController(gated_params([0.03, 0.0], post_gate=True)))
    first = [r.budget for r in dec.decode(prompts[0], MAX_NEW).rounds]
    dec.decode(prompts[1], MAX_NEW)
    assert [r.budget for r in dec.decode(prompts[0], MAX_NEW).rounds] == first
    assert len(set(first)) > 1 or len(first) < 3
