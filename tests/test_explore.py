"""`graftlib.lab.run.explore`: one decode with every round kept, for the explore_rounds notebook."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
from tiny import exactness_pair, exactness_prompts

from graftlib.core.builders import HeapTreeBuilder
from graftlib.lab.run.explore import compare_tree, explore, saba_curves
from graftlib.methods.decoder import Decoder
from graftlib.methods.saba_params import default_params

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def explored():
    target, drafter = exactness_pair("llama")
    pair = SimpleNamespace(target=target, drafter=drafter, eos_ids=[])
    prompt = exactness_prompts("llama", (9,))[0]
    params = replace(default_params(), meta={})  # the shipped numbers, for a tiny pair
    ar = Decoder.for_method(target, drafter, "ar").decode(prompt, 40).tokens
    return explore(pair, prompt, "ddtree+saba", 16, (1, 2, 4, 8, 16), 40, params), ar, params, drafter


def test_the_explored_decode_is_the_decode_with_every_round_kept(explored):
    ex, ar, _, _ = explored
    assert ex.tokens == ar  # the reference trajectory is exact
    assert len(ex.rounds) == len(ex.candidates) == len(ex.states) == len(ex.oracle) == len(ex.starts)
    for r, cand, state in zip(ex.rounds, ex.candidates, ex.states):
        assert (cand is None) == (r.budget == 0) and (state is None) == (r.budget == 0)
        assert r.budget == 0 or (r.tree is not None and len(state) == 4)
    assert ex.starts == [sum(r.accepted for r in ex.rounds[:t]) for t in range(len(ex.rounds))]
    assert ex.continuation(0) == ex.tokens[1:]  # the first round's root is the prefill's token


def test_the_same_builder_rebuilds_the_round_and_walks_the_targets_path(explored):
    """DDTree's heap on round t's own candidates and budget is round t's tree, and the walk along the
    committed continuation is the target's own walk (T = 0)."""
    ex, _, _, _ = explored
    drafted = [t for t, r in enumerate(ex.rounds) if r.budget > 0]
    assert drafted
    for t in drafted:
        again = compare_tree(ex, t, HeapTreeBuilder())
        assert again.tree["tokens"] == ex.rounds[t].tree["tokens"]
        assert again.accepted_nodes == ex.rounds[t].accepted_nodes and again.accepted == ex.rounds[t].accepted
        last = again.accepted_nodes[-1]
        if again.target_next is not None:
            assert again.target_next[last] == ex.rounds[t].target_next[last]  # the bonus token


def test_saba_curves_give_the_controllers_choice(explored):
    ex, _, params, drafter = explored
    t = next(t for t, r in enumerate(ex.rounds) if r.budget > 0)
    grid = [b for b in params.grid if b <= 16]
    curves = saba_curves(params, ex.states[t], ex.rounds[t].prefix_len, drafter.block_size - 1, grid)
    assert curves["B"] == grid and len(curves["utility"]) == len(grid)
    best = curves["B"][max(range(len(grid)), key=lambda i: curves["utility"][i])]
    assert best == ex.rounds[t].budget  # no online correction on the first drafted round: k_t = 1


def test_the_round_panel_draws_the_model_and_the_measure_each_on_its_own_axis(explored):
    """SABA's U_t(B) is priced by its calibration's costs and the replay's TPS by this machine's clock: one panel,
    two y-axes, each labelled with what it is, and both in the one legend."""
    from graftlib.lab.run.explore import plot_round

    ex, _, params, drafter = explored
    t = next(i for i, r in enumerate(ex.rounds) if r.budget > 0 and ex.tps[i])
    other = HeapTreeBuilder()
    fig = plot_round(ex, t, str, other, params, drafter.block_size - 1, ("ddtree+saba", "ddtree"))
    panel, model = fig.axes[2], fig.axes[-1]
    assert model is not panel and model.get_shared_x_axes().joined(model, panel)
    assert panel.get_ylabel().startswith("measured tokens / s") and model.get_ylabel().startswith("U_t(B)")
    labels = [t.get_text() for t in panel.get_legend().get_texts()]
    assert any(label.startswith("SABA's U_t(B)") for label in labels)
    assert any(label.startswith("measured a_t(B)") for label in labels)
