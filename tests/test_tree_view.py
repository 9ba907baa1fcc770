"""`graftlib.lab.tree_view`: a round's tree as text, on a hand-built 5-node tree."""

from types import SimpleNamespace

from graftlib.lab.tree_view import tree_lines

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
