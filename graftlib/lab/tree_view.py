"""One round's draft tree as text: the tree, each node's token and path score, the accepted path and
the target's bonus token (`graft generate --show-tree`).

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
    scores = tree.get("scores") or [0.0] * len(tree["tokens"])
    children: dict[int, list[int]] = {}
    for node in range(1, len(tree["tokens"])):
        children.setdefault(tree["parents"][node], []).append(node)
    for kids in children.values():
        kids.sort(key=lambda n: -scores[n])
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
