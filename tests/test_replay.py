"""Same-prefix replay on tiny models: the replayed reference budget reproduces the round, replay
leaves the state untouched (the continued decode equals AR), oracle bookkeeping, and the
calibration pipeline end to end."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.errors import GraftError
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import MethodInputs, make_parts
from graftlib.methods.saba import round_costs
from graftlib.methods.saba_params import SabaParams
from graftlib.training.graft.calibrate import (
    FitModels,
    fit_params,
    offline_tracking,
    read_replay_records,
    replay_rounds,
    write_records,
)
from graftlib.training.graft.replay import (
    ReplayDecoder,
    ReplaySpec,
    fixed_budget_retained,
    oracle_rows,
    replay_decoder,
    tracking_summary,
)

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_NEW = 37
GRID = [1, 2, 4, 8, 16]


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def pair(request):
    seed = {"llama": 0, "qwen3": 1}[request.param]
    return tiny_target(request.param, seed=seed, initializer_range=0.1), tiny_drafter(seed=seed)


GATED = SabaParams(c_ar=[0.02, 0.0], max_skip=2, post_gate=False)  # AR steps cheap enough that the gate fires
POST_GATED = SabaParams(c_ar=[0.02, 0.0], max_skip=2, c_draft=0.005)  # probes drafted, then declined


@pytest.mark.parametrize("method,budget,params", [("ddtree", 8, None), ("ddtree", 3, None), ("caddtree", 16, None),
                                                  ("ddtree+saba", 16, None), ("ddtree+saba", 16, GATED),
                                                  ("ddtree+saba", 16, POST_GATED)],
                         ids=["ddtree8", "ddtree3", "caddtree", "saba", "saba-gated", "saba-post-gated"])
def test_replay_reproduces_rounds_and_keeps_state(pair, method, budget, params):
    target, drafter = pair
    params = params or SabaParams()
    prompt = random_prompt(7, 11)
    ar = Decoder.for_method(target, drafter, "ar").decode(prompt, MAX_NEW).tokens
    plain = Decoder(target, drafter, *make_parts(method, budget, drafter.block_size,
                                                 inputs=MethodInputs(saba=params))).decode(prompt, MAX_NEW)
    if params is GATED:
        assert any(r.budget == 0 for r in plain.rounds) and any(r.budget for r in plain.rounds)
    if params is POST_GATED:
        assert any(r.budget == 0 and r.t_draft > 0 for r in plain.rounds)
    res = replay_decoder(target, drafter, method, budget, ReplaySpec(tuple(GRID)),
                         MethodInputs(saba=params)).replay(prompt, MAX_NEW)
    assert res.decode.tokens == ar == plain.tokens  # replays left cache and prefix exactly as before
    assert [r.accepted for r in res.decode.rounds] == [r.accepted for r in plain.rounds]
    refs = [r for r in res.records if r.reference]
    assert len(refs) == len(res.decode.rounds)
    for t, (ref, rnd) in enumerate(zip(refs, res.decode.rounds)):
        assert (ref.round, ref.budget, ref.accepted, ref.prefix_len) == (t, rnd.budget, rnd.accepted, rnd.prefix_len)
        grid = {r.budget: r for r in res.records if r.round == t and not r.reference}
        assert sorted(grid) == GRID
        if ref.budget in grid:  # the replay with the budget actually used reproduces the round
            assert (grid[ref.budget].accepted, grid[ref.budget].tokens) == (ref.accepted, ref.tokens)
        if method == "ddtree":
            assert all(grid[b].nodes == b for b in grid)
    assert [r.t_draft > 0 for r in refs] == [r.t_draft > 0 for r in plain.rounds]  # drafted, also when declined
    rows = oracle_rows(res.records)
    assert len(rows) == len(refs) and all(0 < r["retained"] <= 1 for r in rows)
    for ref, row in zip(refs, rows):  # a declined draft is scored with its draft time, not as the grid's AR step
        if ref.budget == 0 and ref.t_draft > 0:
            assert row["tps"] == pytest.approx(1 / ref.latency)
    assert all(r["best_tps"] >= r["tps"] for r in rows)
    s = tracking_summary(rows)
    assert 0 < s["mean_retained"] <= 1 and 0 <= s["frac_ge_95"] <= 1
    fixed = fixed_budget_retained(res.records)
    assert sorted(fixed) == GRID and all(0 < v <= 1 for v in fixed.values())
    per_round_best = [max(GRID, key=lambda b: grid_tps[b]) for grid_tps in
                      ({r.budget: r.tps for r in res.records if r.round == t and not r.reference}
                       for t in range(len(refs)))]
    if len(set(per_round_best)) == 1:  # one budget is the oracle's every round: it retains everything
        assert fixed[per_round_best[0]] == pytest.approx(1.0)


def test_replay_repeats_and_errors(pair):
    target, drafter = pair
    dec = replay_decoder(target, drafter, "ddtree", 4, ReplaySpec((2, 4), repeats=2), MethodInputs(saba=SabaParams()))
    res = dec.replay(random_prompt(3, 5), 12)
    assert res.records and all(r.latency > 0 for r in res.records)
    with pytest.raises(GraftError, match="grid"):
        ReplaySpec((-1, 4))
    with pytest.raises(GraftError, match="repeats"):
        ReplaySpec((4,), repeats=0)
    with pytest.raises(GraftError, match="speculative"):
        ReplayDecoder(target, drafter, None, None, ReplaySpec((4,)))


def test_calibration_pipeline(pair, tmp_path):
    target, drafter = pair
    records = replay_rounds(SimpleNamespace(target=target, drafter=drafter, eos_ids=None),
                            {"0": random_prompt(11, 9), "1": random_prompt(12, 4)}, ReplaySpec((0, *GRID), 20), 4)
    rounds = sorted({r.round for r in records})
    assert rounds == list(range(len(rounds)))  # numbered across prompts
    ar = [r for r in records if r.budget == 0]
    assert len(ar) == len(rounds) and all(r.accepted == 1 and r.t_draft == 0 and r.latency > 0 for r in ar)
    params = fit_params(records, GRID, drafter.block_size - 1, meta={"source": "test"})
    assert params.grid == GRID and params.meta["fit"]["rounds"] == len(rounds)
    prefix = np.mean([r.prefix_len for r in ar])
    assert len(params.c_ar) == 2 and params.c_ar[0] + params.c_ar[1] * prefix > 0
    assert fit_params([r for r in records if r.budget], GRID, drafter.block_size - 1).c_ar is None
    track = offline_tracking(params, records, drafter.block_size - 1)
    assert track["rounds"] == len(rounds) and 0 < track["mean_retained"] <= 1
    fixed4 = offline_tracking(replace(params, grid=[4], c_ar=None), records)  # always B = 4: pooled vs AR steps
    grid = [r for r in records if not r.reference]
    by = {b: [r for r in grid if r.budget == b] for b in (0, 4)}
    assert fixed4["speedup_vs_ar"] == pytest.approx(sum(r.accepted for r in by[4]) / sum(r.latency for r in by[4])
                                                    * sum(r.latency for r in by[0]) / len(by[0]))
    assert offline_tracking(replace(params, grid=[4], c_ar=None),
                            [r for r in records if r.budget])["speedup_vs_ar"] is None
    assert SabaParams.load(params.save(tmp_path / "saba.json")).id == params.id
    write_records(tmp_path / "replay.jsonl", records)
    again = read_replay_records(tmp_path / "replay.jsonl")
    assert again == records and fit_params(again, GRID, drafter.block_size - 1).c == params.c
    assert len(params.c) == 5 and params.c_ar[1] == params.c[4]  # the shared prefix term
    # the rows term of the cost profile: the mean rows each budget's rounds paid, h >= 0
    drafted = [r for r in grid if r.budget > 0]
    assert set(params.rows_cost["ref"]) == {str(b) for b in GRID} and params.rows_cost["h"] >= 0
    assert params.rows_cost["ref"]["4"] == pytest.approx(np.mean([r.accepted for r in drafted if r.budget == 4]))
    assert SabaParams.load(params.save(tmp_path / "saba.json")).rows_cost == params.rows_cost
    paper = fit_params(records, GRID, drafter.block_size - 1,
                       models=FitModels(gain="eq16", concave=False, shared_prefix=False))
    assert len(paper.c) == 3 and paper.gain_table is None
    # the cost table (default): one correction per grid budget, the medians of eq. 17's residuals
    assert sorted(map(int, params.cost_table)) == GRID
    smooth = replace(params, cost_table=None)
    resid = {b: [(r.latency - r.t_draft) - (float(round_costs(smooth, [b], r.prefix_len)[0]) - params.c_draft)
                 for r in records if not r.reference and r.budget == b] for b in GRID}
    assert all(params.cost_table[str(b)] >= np.median(resid[b]) - 1e-9 for b in GRID)  # raised only for monotony
    assert params.cost_table[str(GRID[0])] == pytest.approx(np.median(resid[GRID[0]]))
    assert fit_params(records, GRID, drafter.block_size - 1, models=FitModels(cost="eq17")).cost_table is None
    assert 0 < offline_tracking(paper, records, drafter.block_size - 1)["mean_retained"] <= 1
    with pytest.raises(GraftError, match="gain model"):
        FitModels(gain="mass")
    assert params.c_draft > 0 and params.c_draft == pytest.approx(np.median([r.t_draft for r in records
                                                                             if r.reference and r.budget]))


def test_replay_prompts_resumes_and_numbers_rounds(pair, tmp_path):
    from tiny import tiny_tokenizer

    from graftlib.core.records import read_records
    from graftlib.data.prompts import Item
    from graftlib.models import Pair
    from graftlib.training.graft.replay import records_of, replay_prompts

    target, drafter = pair
    p = Pair(target, tiny_tokenizer(), drafter, False, "tiny", "tiny")
    items = [Item("alpaca", f"alpaca/{i}", t, t) for i, t in enumerate(["count to five.", "name a color."])]
    out = tmp_path / "replay.jsonl"
    spec = ReplaySpec((2, 4), 12)
    first = replay_prompts(p, "ddtree", 4, items[:1], out, spec)
    lines = replay_prompts(p, "ddtree", 4, items, out, spec)
    assert len(read_records(out)) == 2 and lines[0] == first[0]  # the first prompt was not redone
    rows = oracle_rows(records_of(lines))
    n_rounds = sum(line["summary"]["rounds"] for line in lines)
    assert len(rows) == n_rounds and len({r["round"] for r in rows}) == n_rounds
    replay_prompts(p, "ddtree", 8, items[:1], out, spec)  # another setting: a new line
    assert len(read_records(out)) == 3
    with pytest.raises(GraftError, match="walks exactly when"):  # a walk that nothing prices
        replay_prompts(p, "ddtree", 4, items[:1], out, ReplaySpec((2, 4), 12, walk=True))
