"""Draft trees as plain data, and the one pure function that derives verify inputs from them.

A `Tree` is three parallel lists over nodes 0..N: `tokens`, `parents`, `depths`. Node 0 is the
root: the bonus token of the previous round (already the target's own token, not yet in the
target KV cache), with parent -1 and depth 0. Nodes 1..N are drafts; the budget counts them,
not the root, so a verify pass has 1 + N tokens.

Invariants (checked by `Tree.validate`, relied on everywhere):
- parents[i] < i for i >= 1 (topological order), depths[i] = depths[parents[i]] + 1;
- siblings carry distinct tokens (so the greedy walk has at most one child to follow).

`verify_inputs(tree, start)` is the single place that turns a tree into what the target needs:
position ids `start + depth`, the ancestor-or-self visibility matrix, the additive 4D attention
mask over `[prefix (start) | tree (N+1)]`, each node's child map for the walk, and the
root-to-node paths (Medusa/EAGLE "retrieve indices"). `greedy_walk` accepts the longest path
whose tokens equal the target's argmax tokens (exact at temperature 0).
"""

from dataclasses import dataclass, field

import torch


@dataclass
class Tree:
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    # Optional per-node draft score used to build the tree (sum of edge scores); not used to verify.
    scores: list[float] = field(default_factory=list)

    @classmethod
    def root_only(cls, root_token: int) -> "Tree":
        return cls([root_token], [-1], [0], [0.0])

    @classmethod
    def chain(cls, root_token: int, drafts: list[int]) -> "Tree":
        """The DFlash chain: root -> d1 -> d2 -> ... (a tree with one path)."""
        n = len(drafts)
        return cls([root_token, *drafts], [-1, *range(n)], list(range(n + 1)), [0.0] * (n + 1))

    @property
    def num_nodes(self) -> int:
        """Draft nodes, root excluded (what a budget counts)."""
        return len(self.tokens) - 1

    @property
    def max_depth(self) -> int:
        return max(self.depths)

    def add(self, token: int, parent: int, score: float = 0.0) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.scores.append(score)
        return len(self.tokens) - 1

    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents) if i > 0)

    def validate(self) -> None:
        n = len(self.tokens)
        assert len(self.parents) == n == len(self.depths) and n >= 1
        assert self.parents[0] == -1 and self.depths[0] == 0
        seen = set()
        for i in range(1, n):
            p = self.parents[i]
            assert 0 <= p < i, f"node {i}: parent {p} must precede it"
            assert self.depths[i] == self.depths[p] + 1, f"node {i}: depth {self.depths[i]} != parent's + 1"
            assert (p, self.tokens[i]) not in seen, f"node {i}: duplicate token {self.tokens[i]} under parent {p}"
            seen.add((p, self.tokens[i]))


@dataclass
class VerifyInputs:
    input_ids: torch.Tensor  # [1, N+1] tree tokens (root first)
    position_ids: torch.Tensor  # [1, N+1] start + depth
    visible: torch.Tensor  # [N+1, N+1] bool, visible[i, j] = j is i or an ancestor of i
    attention_mask: torch.Tensor | None  # [1, 1, N+1, start+N+1] additive; None for a chain (causal)
    children: list[dict[int, int]]  # children[i][token] = child node index
    paths: list[list[int]]  # paths[i] = node indices root..i


def ancestor_matrix(parents: list[int], max_depth: int | None = None) -> torch.Tensor:
    """visible[i, j] is True iff j == i or j is an ancestor of i.

    Vectorized over nodes: walk every node up one level per step (the root is its own parent
    here), marking the node reached; `max_depth + 1` steps reach the root from any node.
    """
    n = len(parents)
    up = torch.tensor(parents)
    up[0] = 0
    steps = (max_depth if max_depth is not None else n - 1) + 1
    visible = torch.zeros(n, n, dtype=torch.bool)
    rows = torch.arange(n)
    cur = rows
    for _ in range(steps):
        visible[rows, cur] = True
        cur = up[cur]
    return visible


def verify_inputs(tree: Tree, start: int, device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32) -> VerifyInputs:
    """Derive the target's verify inputs for `tree` placed after a cached prefix of `start` tokens."""
    n = len(tree.tokens)
    visible = ancestor_matrix(tree.parents, max(tree.depths))
    children: list[dict[int, int]] = [{} for _ in range(n)]
    paths: list[list[int]] = []
    for i, p in enumerate(tree.parents):
        paths.append([i] if p < 0 else paths[p] + [i])
        if p >= 0:
            children[p][tree.tokens[i]] = i
    if tree.is_chain():
        mask = None  # plain causal attention: the fast path of every attention backend
    else:
        mask = torch.zeros(1, 1, n, start + n, dtype=dtype)
        mask[0, 0, :, start:].masked_fill_(~visible, torch.finfo(dtype).min)
        mask = mask.to(device)
    return VerifyInputs(
        input_ids=torch.tensor([tree.tokens], device=device),
        position_ids=(torch.tensor([tree.depths]) + start).to(device),
        visible=visible,
        attention_mask=mask,
        children=children,
        paths=paths,
    )


def greedy_walk(children: list[dict[int, int]], target_next: list[int]) -> tuple[list[int], int]:
    """Accept the longest root path whose next tokens are the target's argmax tokens.

    `target_next[i]` is argmax of the target logits at node i. Returns (accepted node indices,
    root first; the bonus token = the target's token after the last accepted node).
    """
    node, accepted = 0, [0]
    nxt = target_next[0]
    while nxt in children[node]:
        node = children[node][nxt]
        accepted.append(node)
        nxt = target_next[node]
    return accepted, nxt


def parent_mismatch(tokens: list[int], parents: list[int], depths: list[int], last: int, bonus: int) -> bool:
    """The paper's parent-child mismatch (Figure 1): the target's next token `bonus` (t*) after the
    last accepted node `last` (p*, depth d*) is in the tree at depth d* + 1, under another parent."""
    d = depths[last] + 1
    return any(depths[n] == d and tokens[n] == bonus and parents[n] != last for n in range(1, len(tokens)))

