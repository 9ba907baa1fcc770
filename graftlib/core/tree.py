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
from functools import cached_property

import numpy as np
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
    visible: torch.Tensor  # [N+1, N+1] bool (host), visible[i, j] = j is i or an ancestor of i
    attention_mask: torch.Tensor | None  # [1, 1, N+1, start+N+1] additive; None for a chain (causal)
    children: list[dict[int, int]]  # children[i][token] = child node index
    parents: list[int]

    @cached_property
    def paths(self) -> list[list[int]]:
        """paths[i] = node indices root..i (derived on first use: the decode loop does not need them)."""
        paths: list[list[int]] = []
        for i, p in enumerate(self.parents):
            paths.append([i] if p < 0 else paths[p] + [i])
        return paths


def ancestor_matrix(parents, max_depth: int | None = None) -> torch.Tensor:
    """visible[i, j] is True iff j == i or j is an ancestor of i (a host bool tensor).

    Vectorized over nodes: `max_depth` pointer-jumping steps list every node's ancestors by level
    (the root is its own parent here), then one scatter marks them all.
    """
    n = len(parents)
    up = np.array(parents)
    up[0] = 0
    steps = max_depth if max_depth is not None else n - 1
    levels = [np.arange(n)]
    for _ in range(steps):
        levels.append(up[levels[-1]])
    visible = np.zeros((n, n), dtype=bool)
    visible[levels[0][:, None], np.stack(levels, axis=1)] = True
    return torch.from_numpy(visible)


def verify_inputs(tree: Tree, start: int, device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32) -> VerifyInputs:
    """Derive the target's verify inputs for `tree` placed after a cached prefix of `start` tokens.

    Host work is numpy; the device gets two uploads: tokens and positions in one [2, N+1] tensor,
    and, for a tree that is not a chain, the hidden pairs, from which the mask is made there.
    """
    n = len(tree.tokens)
    host = np.array([tree.tokens, tree.depths, tree.parents])  # [3, N+1] int64
    visible = ancestor_matrix(host[2], int(host[1].max()))
    host[1] += start
    children: list[dict[int, int]] = [{} for _ in range(n)]
    tokens = tree.tokens
    for i, p in enumerate(tree.parents[1:], 1):
        children[p][tokens[i]] = i
    ids_pos = torch.from_numpy(host[:2]).to(device)  # one upload
    mask = None  # a chain: plain causal attention, the fast path of every attention backend
    if not tree.is_chain():
        mask = torch.zeros(1, 1, n, start + n, dtype=dtype, device=device)
        mask[0, 0, :, start:].masked_fill_(visible.logical_not().to(device), torch.finfo(dtype).min)
    return VerifyInputs(
        input_ids=ids_pos[:1],
        position_ids=ids_pos[1:],
        visible=visible,
        attention_mask=mask,
        children=children,
        parents=tree.parents,
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

