"""Figures show what their data say: no legend over a label, no claim cut short, no token drawn as an empty box."""

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest

from graftlib.core.errors import GraftError
from graftlib.lab.workbook.plots import claims, figures, layout, tables, trees


def _bars(legend):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(6, 3))
    for ax in axes:
        layout.grouped_bars(ax, ["gsm8k", "mbpp"], [("ours", [1.0, 0.0], "tab:blue"),
                                                    ("paper", [2.0, 3.0], "tab:green")])
        ax.set_xlabel("task")
        ax.set_ylabel("MAT")
    legend(fig, axes)
    return fig


def test_a_legend_over_the_axis_labels_is_refused(tmp_path):
    """A legend pinned over the tick labels is found by its drawn extent and the figure is not written; the
    workbook's own placement (`legend_below`) passes."""
    covering = _bars(lambda fig, axes: axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, 0.02)))
    assert layout.layout_problems(covering)
    with pytest.raises(GraftError, match="overlaps the label"):
        layout.save_figure(covering, "covering", tmp_path)
    assert not list(tmp_path.iterdir())
    below = _bars(lambda fig, axes: (fig.tight_layout(), layout.legend_below(fig, axes)))
    assert layout.layout_problems(below) == []
    assert [p.name for p in layout.save_figure(below, "below", tmp_path)] == ["below.png", "below.pdf"]


def test_tick_labels_drawn_over_each_other_are_found():
    import matplotlib.pyplot as plt

    names = ["paper set, the paper's A100 costs and acceptance (a construction)", "CPU set + AR step, this machine"]
    fig, ax = plt.subplots(figsize=(4, 3))
    layout.grouped_bars(ax, names, [("SABA", [0.9, 0.8], "tab:blue")])
    ax.set_xticks(range(2), names)
    assert any("the tick labels" in p and "overlap" in p for p in layout.tick_overlaps(fig))
    ax.set_xticks(range(2), ["paper set", "CPU set"])
    assert layout.tick_overlaps(fig) == []


def test_save_figure_turns_crowded_tick_labels_and_refuses_what_stays_crowded(tmp_path):
    import matplotlib.pyplot as plt

    names = [f"a long method name, number {i}" for i in range(6)]
    fig, ax = plt.subplots(figsize=(4, 3))
    layout.grouped_bars(ax, names, [("SABA", [0.9] * 6, "tab:blue")])
    ax.set_ylabel("retained")
    assert layout.tick_overlaps(fig)
    layout.save_figure(fig, "turned", tmp_path)
    assert layout.tick_overlaps(fig) == [] and (tmp_path / "turned.png").exists()
    assert {t.get_rotation() for t in ax.get_xticklabels()} != {0.0}
    fig, ax = plt.subplots(figsize=(1.5, 3))
    ax.set_xticks(range(40), [f"m{i}" for i in range(40)], fontsize=12)  # 40 labels in 1.5 inches: no angle parts them
    with pytest.raises(GraftError, match="figure crowded: the tick labels"):
        layout.save_figure(fig, "crowded", tmp_path)
    assert not (tmp_path / "crowded.png").exists()


def test_turned_tick_labels_hang_below_their_panel_and_a_label_inside_it_is_refused(tmp_path):
    """Labels turned upright are anchored at their end, under the axis; a label drawn over the bars (centred
    upright labels rise into the panel) is found and the figure is not written."""
    import matplotlib.pyplot as plt

    names = [f"component number {i}" for i in range(9)]
    fig, ax = plt.subplots(figsize=(3, 3))
    layout.grouped_bars(ax, names, [("ours", [-20.0 + 5 * i for i in range(9)], "tab:blue")])
    ax.set_ylabel("tokens/s vs DDTree (%)")
    layout.save_figure(fig, "upright", tmp_path)
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {90.0} and layout.labels_inside(fig) == []
    for t in ax.get_xticklabels():
        t.set(rotation=90, ha="center", rotation_mode="anchor")  # the old anchor: the label rises into the bars
    assert len(layout.labels_inside(fig)) == len(names)
    with pytest.raises(GraftError, match="lies inside its panel"):
        layout.save_figure(fig, "inside", tmp_path)
    assert not (tmp_path / "inside.png").exists()


def test_table2_draws_acceptance_beside_speed_size_and_the_ar_gate():
    labels = ["DDTree", "+TDES", "+SABA", "GRAFT"]
    T = pd.DataFrame({"nodes/round": [16.0, 16.0, 5.0, 5.0], "MAT": [3.1, 3.2, 2.4, 2.5],
                      "m-dTPS %": [0.0, 1.0, 2.0, 3.0],
                      "AR steps %": [0.0, 0.0, 60.0, 59.0], "paper nodes": [110.0, 110.0, 49.0, 49.0],
                      "paper MAT": [6.0, 6.2, 5.6, 5.8], "paper dTPS %": [0.0, 5.7, 12.8, 19.4]}, index=labels)
    fig = tables.plot_components(T, labels, "Table 2", "ours", "paper")
    assert [ax.get_title() for ax in fig.axes] == ["tokens/s against DDTree", "tree size", "acceptance",
                                                   "SABA's AR gate"]
    heights = sorted(round(b.get_height(), 2) for b in fig.axes[2].patches)
    assert heights == sorted([3.1, 3.2, 2.4, 2.5, 6.0, 6.2, 5.6, 5.8])
    assert all(ax.get_ylabel() for ax in fig.axes)


def test_fig6_names_its_budget_sets_in_full_without_overlap():
    fixed = {n: {"saba": 0.9, "best_fixed": 0.92, "best_fixed_budget": 32, "ratio": 0.98, "ci": (0.97, 0.99)}
             for n in ("CPU set, this machine", "paper set, the paper's A100 costs",
                       "paper set, the paper's A100 costs and acceptance (a construction)",
                       "CPU set + AR step, this machine")}
    rows = {n: pd.DataFrame({"retained": [0.9, 0.95, 1.0]}) for n in fixed}
    fig = figures.plot_oracle_tracking(fixed, rows, 0.941, "Figure 6")
    assert layout.layout_problems(fig) == [] and layout.tick_overlaps(fig) == []
    ticks = " ".join(" ".join(t.get_text().split()) for t in fig.axes[0].get_xticklabels())
    assert all(n in ticks for n in fixed)
    assert len(fig.axes[1].lines) == len(fixed) + 1  # (b): one line per set (none hides another) and the paper's mean


def test_a_zero_bar_is_drawn_as_a_value():
    fig = _bars(lambda fig, axes: None)
    assert [t.get_text() for t in fig.axes[0].texts] == ["0"]


def test_the_claims_figure_draws_every_cell_in_full():
    """Every cell of the claims table, long ones included, is in the figure word for word (wrapped, never cut)."""
    long = "direction only (1.093x [1.041, 1.150] vs the paper's 1.254x) (tasks: 2 direction only, 1 inside noise)"
    C = pd.DataFrame({"source": ["Table 1 (i)", "Table 3"],
                      "paper": ["GRAFT achieves the highest wall-time speedup (vs DDTree)",
                                "beta = 0.2 gives the highest TPS of beta in {0, 0.05, 0.1, 0.2, 0.4}"],
                      "machine wall-clock": [long, "opposite (best beta 0)"],
                      "machine counts": ["3 tasks x 10 prompts x 128 tokens"] * 2}, index=["C1", "T3"])
    C["paper+acceptance counts"] = C["machine counts"]  # the longest header of the workbook's table
    fig = claims.plot_claims(C, "claims")
    drawn = " ".join(" ".join(c.get_text().get_text().split()) for c in fig.axes[0].tables[0].get_celld().values())
    for i in C.index:
        for cell in (C.at[i, "paper"], C.at[i, "machine wall-clock"], C.at[i, "machine counts"]):
            assert " ".join(cell.split()) in drawn, cell
    assert "counts" in drawn and "paper+acceptance counts" not in drawn  # one counts column: the same everywhere
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for (row, col), cell in fig.axes[0].tables[0].get_celld().items():  # each text inside its own cell
        box, text = cell.get_window_extent(renderer), cell.get_text().get_window_extent(renderer)
        assert box.x0 <= text.x0 and text.x1 <= box.x1, (row, col, cell.get_text().get_text())


def test_the_claims_figure_names_its_regimes_the_construction_and_its_colours():
    C = pd.DataFrame({"source": ["Table 1 (i)"], "paper": ["GRAFT beats DDTree"],
                      "machine wall-clock": ["opposite (0.9x)"],
                      "machine counts": ["3 tasks x 10 prompts x 128 tokens"],
                      "paper+acceptance modeled": ["reproduced (1.3x)"],
                      "paper+acceptance counts": ["1 task x 10 prompts x 128 tokens"]}, index=["C1"])
    cols, heads = claims.claims_columns(C)
    assert cols == ["machine wall-clock", "paper+acceptance modeled"]
    assert heads == ["this machine, wall clock", "paper's costs + acceptance (construction: own-spine), modeled"]
    assert claims.claims_counts(C, "C1") == ("this machine: 3 tasks x 10 prompts x 128 tokens; paper's costs + "
                                            "acceptance (construction: own-spine): 1 task x 10 prompts x 128 "
                                            "tokens")
    fig = claims.plot_claims(C, "claims")
    drawn = " ".join(" ".join(c.get_text().get_text().split()) for c in fig.axes[0].tables[0].get_celld().values())
    assert "construction: own-spine" in drawn
    (key,) = fig.legends
    assert [t.get_text() for t in key.get_texts()] == list(claims.VERDICT_COLOURS)


def test_tokens_are_drawn_visibly():
    assert trees.visible(" ") == "\u2423" and trees.visible(" the") == "\u2423the"
    assert trees.visible("\n") == "\u23ce" and trees.visible("") == "\u2205" and trees.visible("ab") == "ab"


def test_whiskers_only_where_an_interval_exists():
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    layout.grouped_bars(ax, ["a", "b", "c"], [("ours", [1.0, 1.2, 1.1], "tab:blue", ([0.9, 1.2, float("nan")],
                                                                                  [1.1, 1.2, float("nan")]))])
    bars = [c for c in ax.containers if hasattr(c, "has_yerr")]
    assert len(bars) == 1 and len(bars[0].lines[2][0].get_segments()) == 1  # "a" only: "b" is a point, "c" none


def test_a_legend_under_one_panel_clears_its_labels_after_the_layout():
    """`legend_outside` sits below the panel's tick labels and x label, however tall they are, also after
    `tight_layout` resizes the panels."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(10, 3))
    for ax in axes:
        ax.plot([1, 2], [1, 2], label="a long series name")
        ax.set_xticks([1, 2], ["two\\nline", "ticks"])
        ax.set_xlabel("step")
        layout.legend_outside(ax)
    fig.tight_layout()
    assert layout.layout_problems(fig) == []


def test_tick_labels_beyond_the_view_limits_are_not_drawn_so_never_overlap():
    """matplotlib returns labels for ticks outside the view limits, placed outside the panel and never drawn: a
    legend under the figure may sit where they would be."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [5.5, 9], label="series")
    ax.set_yticks([5, 6, 7, 8, 9])
    ax.set_ylim(5.5, 9)  # the tick at 5 lies below the panel
    assert "5" in [t.get_text() for t in ax.get_yticklabels()]
    assert "5" not in [t.get_text() for t in layout._drawn_ticklabels(ax, "y")]
    assert [t.get_text() for t in layout._drawn_ticklabels(ax, "y")] == ["6", "7", "8", "9"]


def test_a_panel_whose_y_axis_nothing_names_is_refused(tmp_path):
    """A y label, a panel title or a y label elsewhere in the panel's row names it; a bare panel is refused."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(6, 3))
    for ax in axes:
        ax.plot([1, 2, 3], [3, 1, 2])
    assert len(layout.unnamed_axes(fig)) == 2
    with pytest.raises(GraftError, match="has no y label or title"):
        layout.save_figure(fig, "bare", tmp_path)
    assert not (tmp_path / "bare.png").exists()
    axes[0].set_ylabel("tokens / s")  # the row's label names both panels
    assert layout.unnamed_axes(fig) == []
    fig, ax = plt.subplots(figsize=(3, 3))
    ax.plot([1, 2], [1, 2])
    ax.set_title("MAT")
    assert layout.unnamed_axes(fig) == []


def test_the_regimes_figure_draws_figure_6_as_a_distribution_not_a_line_of_rounds():
    """Panel (c): hundreds of rounds read as the share of rounds keeping at least x of the oracle."""
    from graftlib.lab.workbook.plots.figures import plot_regimes

    T = pd.DataFrame({"regime": ["machine", "paper"], "method": ["GRAFT", "GRAFT"], "speedup modeled": [1.2, 1.5],
                      "speedup wall": [1.1, None], "paper speedup": [5.28, 5.28]})
    curve = pd.DataFrame({"m_tps": [1.0, 2.0, 1.5, 3.0]},
                         index=pd.MultiIndex.from_tuples([("easy", 4), ("easy", 8), ("hard", 4), ("hard", 8)]))
    oracle = pd.DataFrame({"round": range(400), "retained": [0.8 + 0.2 * (i % 5) / 4 for i in range(400)]})
    fig = plot_regimes(T, curve, oracle, "t", 0.941)
    panel = fig.axes[2]
    (line,) = [ln for ln in panel.get_lines() if len(ln.get_xdata()) == 400]
    assert sorted(line.get_xdata(), reverse=True) == list(line.get_xdata())  # retained shares, largest first
    assert line.get_ydata()[-1] == 1.0 and panel.get_xlabel().startswith("retained share")
    legends = [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend())]
    assert any("of rounds" in t.get_text() for legend in legends for t in legend.get_texts())
