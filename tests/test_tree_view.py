"""`graftlib.lab.report.tree_view`: a round's tree as text, on a hand-built 5-node tree."""

from types import SimpleNamespace

from graftlib.lab.report.tree_view import tree_lines

# root 'r' -> a (-0.1) -> c (-0.3, accepted) ; a -> d (-0.9); root -> b (-0.5) -> e (-0.7)
TREE = {"tokens": [0, 1, 2, 3, 4, 5], "parents": [-1, 0, 0, 1, 1, 2], "depths": [0, 1, 1, 2, 2, 3],
        "scores": [0.0, -0.1, -0.5, -0.3, -0.9, -0.7]}
NAMES = dict(enumerate("rabcde"))


def record(**kw):
    base = dict(tree=TREE, accepted_nodes=[0, 1, 3], target_next=[1, 3, 9, 5, 9, 9], budget=5, nodes=5, accepted=3)
    return SimpleNamespace(**{**base, **kw})


def test_the_text_tree_marks_the_path_orders_children_and_shows_the_bonus():
    lines = tree_lines(record(), NAMES.get)
    assert lines == [
        "['r']  B=5 nodes=5 accepted=3",
        "|- * 'a' -0.10",
        "|  |- * 'c' -0.30",
        "|  |     -> bonus 'e'",
        "|  `- - 'd' -0.90",
        "`- - 'b' -0.50",
        "   `- - 'e' -0.70",
    ]


def test_children_follow_the_score_and_a_large_tree_is_cut_saying_so():
    flipped = {**TREE, "scores": [0.0, -0.6, -0.5, -0.3, -0.9, -0.7]}  # b now above a
    lines = tree_lines(record(tree=flipped, target_next=[1, 3, 9, 4, 9, 9]), NAMES.get, max_nodes=2)
    assert lines[1] == "|- - 'b' -0.50" and lines[2] == "|  `- - 'e' -0.70"
    assert lines[-1] == "... 3 more nodes not shown (max_nodes 2)"


def test_the_drawing_has_the_edges_path_bonus_mismatch_and_comparison():
    """Read back from the figure's artists: every edge once, the accepted path in green, every node's label,
    the bonus token after the last accepted node, the node carrying it under another parent ringed red,
    and against another tree with a -> f instead of a -> d and b -> e: d and e marked new, f counted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    from graftlib.lab.report.tree_view import draw_tree

    other = {"tokens": [0, 1, 2, 3, 6], "parents": [-1, 0, 0, 1, 1], "depths": [0, 1, 1, 2, 2]}  # a->f, no e
    fig, ax = plt.subplots(figsize=(1.6, 2.0))  # a quarter inch a depth: a deep tree in a narrow panel
    drawn = draw_tree(ax, record(), {**NAMES, 6: "f"}.get, other=other)
    edges = {line.get_gid(): line for line in ax.lines if (line.get_gid() or "").startswith("edge")}
    assert set(edges) == {"edge 0-1", "edge 1-3", "edge 1-4", "edge 0-2", "edge 2-5"}
    green = to_rgba("tab:green")
    assert {g for g, line in edges.items() if to_rgba(line.get_color()) == green} == {"edge 0-1", "edge 1-3"}
    labels = {t.get_gid(): t for t in ax.texts if (t.get_gid() or "").startswith("node")}
    assert {g: t.get_text() for g, t in labels.items()} == {
        "node 0": "r", "node 1": "a", "node 2": "b", "node 3": "c", "node 4": "+d", "node 5": "+e"}
    assert labels["node 3"].get_fontweight() == "bold" and labels["node 4"].get_fontweight() == "normal"
    assert to_rgba(labels["node 5"].get_bbox_patch().get_edgecolor()) == to_rgba("tab:red")  # the mismatch
    bonus = next(t for t in ax.texts if t.get_gid() == "bonus")
    assert bonus.get_text() == "bonus 'e'" and bonus.get_position()[0] == 3  # one depth after 'c'
    assert drawn["mismatch"] == [5] and drawn["new"] == [4, 5] and drawn["left_out"] == 1 and drawn["cut"] == 0
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_bbox_patch().get_window_extent(renderer) for t in labels.values()]
    words = bonus.get_window_extent(renderer)  # the bonus reads clear of every node's box and inside the panel
    assert not any(words.overlaps(b) for b in boxes) and words.x1 <= ax.get_window_extent(renderer).x1
    plt.close(fig)


def test_tokens_with_dollar_signs_draw_as_text():
    """GSM8K's tokens carry "$": two of them in one label are not mathtext (drawing once raised a ValueError in
    explore_rounds' slider)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from graftlib.lab.report.tree_view import draw_tree

    fig, ax = plt.subplots()
    draw_tree(ax, record(), {**NAMES, 3: "$x^$", 5: "$", 9: "$"}.get)
    fig.canvas.draw()  # raised: mathtext parse error
    assert any(t.get_text() == "$x^$" for t in ax.texts)
    plt.close(fig)
