"""Checks on a tree's plain data that only tests run (the package's trees are built valid by construction)."""


def validate(tree) -> None:
    """Parents precede their children, depths follow parents, no two siblings carry one token."""
    n = len(tree.tokens)
    assert len(tree.parents) == n == len(tree.depths) and n >= 1
    assert tree.parents[0] == -1 and tree.depths[0] == 0
    seen = set()
    for i in range(1, n):
        p = tree.parents[i]
        assert 0 <= p < i, f"node {i}: parent {p} must precede it"
        assert tree.depths[i] == tree.depths[p] + 1, f"node {i}: depth {tree.depths[i]} != parent's + 1"
        assert (p, tree.tokens[i]) not in seen, f"node {i}: duplicate token {tree.tokens[i]} under parent {p}"
        seen.add((p, tree.tokens[i]))


def is_chain(tree) -> bool:
    return all(p == i - 1 for i, p in enumerate(tree.parents) if i > 0)
