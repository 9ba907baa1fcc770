"""One round's draft tree, as text (`tree_lines`, `graft generate --show-tree`) and as a drawing
(`draw_tree`, the explore_rounds notebook): each node's token and path score, the accepted path, the
target's bonus token.

Input is a round's record with its tree (`RoundRecord` of a decode with `record_trees`): `tree`
(tokens, parents, depths and, where the builder kept them, the path scores), `accepted_nodes` (the
root first) and `target_next` (the target's token at every node: the bonus is the last accepted
node's). Children are listed by descending score (the heap's order), so the first child is the one
the tree builder preferred. Trees larger than `max_nodes` are cut after that many nodes in that
order, and the cut says how many it left out.
"""

from collections.abc import Callable


def tree_lines(record, decode: Callable[[int], str], max_nodes: int = 128) -> list[str]:
    """The round's tree as indented lines: `* 'token' score` for an accepted node, `- ...` for the
    others, then the bonus token under the last accepted node."""
    tree, accepted = record.tree, set(record.accepted_nodes)
    last = record.accepted_nodes[-1]
    scores = _scores(tree)
    children = _children(tree)
    lines = [f"[{decode(tree['tokens'][0])!r}]  B={record.budget} nodes={record.nodes} accepted={record.accepted}"]
    shown = 0

    def walk(node: int, indent: str) -> None:
        nonlocal shown
        kids = children.get(node, [])
        for i, kid in enumerate(kids):
            if shown >= max_nodes:
                return
            shown += 1
            tail = i == len(kids) - 1
            mark = "*" if kid in accepted else "-"
            lines.append(f"{indent}{'`-' if tail else '|-'} {mark} {decode(tree['tokens'][kid])!r} {scores[kid]:+.2f}")
            walk(kid, indent + ("   " if tail else "|  "))
        if node == last and record.target_next is not None:
            lines.append(f"{indent}   -> bonus {decode(record.target_next[last])!r}")

    walk(0, "")
    if shown < len(tree["tokens"]) - 1:
        lines.append(f"... {len(tree['tokens']) - 1 - shown} more nodes not shown (max_nodes {max_nodes})")
    return lines


def _scores(tree: dict) -> list[float]:
    return tree.get("scores") or [0.0] * len(tree["tokens"])


def _children(tree: dict) -> dict[int, list[int]]:
    """{node: its children, best path score first (ties: the earlier node)}."""
    scores = _scores(tree)
    children: dict[int, list[int]] = {}
    for node in range(1, len(tree["tokens"])):
        children.setdefault(tree["parents"][node], []).append(node)
    return {p: sorted(kids, key=lambda n: -scores[n]) for p, kids in children.items()}


def _order(tree: dict, max_nodes: int) -> list[int]:
    """Nodes in the text view's order (depth-first, children best first), root first, at most
    `max_nodes` draft nodes."""
    children = _children(tree)
    out, stack = [], [0]
    while stack and len(out) <= max_nodes:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(children.get(node, [])))  # the best child is popped first
    return out


def _layout(tree: dict, order: list[int]) -> dict[int, tuple[float, float]]:
    """(depth, -row) per shown node: leaves take successive rows in `order`, a parent sits level with
    its first (best) child, so the builder's preferred path reads as a straight line."""
    shown = set(order)
    kids = {n: [c for c in _children(tree).get(n, []) if c in shown] for n in order}
    leaves = [n for n in order if not kids[n]]
    row = {n: float(i) for i, n in enumerate(leaves)}
    for n in reversed(order):  # children before parents
        if kids[n]:
            row[n] = row[kids[n][0]]
    return {n: (tree["depths"][n], -row[n]) for n in order}


def _paths(tree: dict) -> dict[tuple[int, ...], int]:
    """{token path from the first draft depth: node} of a recorded tree."""
    paths: dict[int, tuple[int, ...]] = {0: ()}
    for node in range(1, len(tree["tokens"])):
        paths[node] = paths[tree["parents"][node]] + (tree["tokens"][node],)
    return {p: n for n, p in paths.items() if n}


def draw_tree(ax, record, decode: Callable[[int], str], other: dict | None = None, max_nodes: int = 128,
              title: str | None = None) -> dict:
    """Draw the round's tree on `ax` (module doc). Returns what it drew: {"nodes", "accepted", "bonus",
    "mismatch", "new", "left_out", "cut"} (node indices, or counts for the last two)."""
    import matplotlib

    tree = record.tree
    scores = _scores(tree)
    order = _order(tree, max_nodes)
    shown = set(order)
    accepted, last = set(record.accepted_nodes), record.accepted_nodes[-1]
    bonus = record.target_next[last] if record.target_next is not None else None
    d_last = tree["depths"][last]
    mismatch = [n for n in order if bonus is not None and tree["tokens"][n] == bonus
                and tree["depths"][n] == d_last + 1 and tree["parents"][n] != last]
    theirs = _paths(other) if other is not None else {}
    ours = _paths(tree)
    new = [ours[p] for p in ours if other is not None and p not in theirs and ours[p] in shown]
    pos = _layout(tree, order)
    edge_scores = [scores[n] - scores[tree["parents"][n]] for n in order[1:]]
    lo, hi = (min(edge_scores), max(edge_scores)) if edge_scores else (0.0, 0.0)
    cmap = matplotlib.colormaps["Blues"]
    for n in order[1:]:
        p = tree["parents"][n]
        on_path = n in accepted
        shade = 0.35 + 0.65 * ((scores[n] - scores[p] - lo) / (hi - lo) if hi > lo else 1.0)
        ax.plot([pos[p][0], pos[n][0]], [pos[p][1], pos[n][1]], color="tab:green" if on_path else cmap(shade),
                lw=2.5 if on_path else 1.2, zorder=1, gid=f"edge {p}-{n}")
    for n in order:
        label = repr(decode(tree["tokens"][n]))[1:-1] or "."
        face = "honeydew" if n in accepted else "white"
        ring = "tab:red" if n in mismatch else "black" if n == last else "0.6"
        ax.text(*pos[n], ("+" if n in new else "") + label, ha="center", va="center", fontsize=7,
                fontweight="bold" if n in accepted else "normal", gid=f"node {n}", parse_math=False,  # "$5" is text
                bbox=dict(boxstyle="round,pad=0.2", fc=face, ec=ring, lw=1.5 if n in mismatch or n == last else 0.6))
    if bonus is not None:
        x, y = pos[last]
        # the bonus starts one depth on, left-aligned, so it never runs back over the last accepted node's box
        ax.annotate(f"bonus {decode(bonus)!r}", (x + 1, y), xytext=(x + 1, y), ha="left", va="center", fontsize=7,
                    color="tab:red" if mismatch else "tab:green", gid="bonus", parse_math=False)
        ax.plot([x + 0.4, x + 0.95], [y, y], ls=":", color="tab:green", lw=1)
    cut = len(tree["tokens"]) - len(order)
    notes = [f"{len(order) - 1} of {len(tree['tokens']) - 1} nodes shown" if cut else ""]
    left_out = len([p for p in theirs if p not in ours]) if other is not None else 0
    if other is not None:
        notes.append(f"+ : not in the other tree; {left_out} of its nodes are not in this one")
    ax.set_xlabel("depth")
    ax.set_xticks(range(max(tree["depths"][n] for n in order) + 2))
    ax.set_yticks([])
    ax.set_xlim(-0.5, max(tree["depths"][n] for n in order) + 2.6)
    ax.set_title(title or f"B={record.budget}, {record.nodes} nodes, accepted {record.accepted}", fontsize=8)
    ax.text(0.0, -0.24, "; ".join(n for n in notes if n), transform=ax.transAxes, fontsize=6, va="top")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return {"nodes": order, "accepted": [n for n in order if n in accepted], "bonus": bonus, "mismatch": mismatch,
            "new": new, "left_out": left_out, "cut": cut}
