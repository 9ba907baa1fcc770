"""Draft trees as plain data, and the one pure function that derives verify inputs from them.

A `Tree` is three parallel lists over nodes 0..N: `tokens`, `parents`, `depths`. Node 0 is the
root: the bonus token of the previous round (already the target's own token, not yet in the
target KV cache), with parent -1 and depth 0. Nodes 1..N are drafts; the budget counts them,
not the root, so a verify pass has 1 + N tokens.

Invariants (checked by `Tree.validate`, relied on everywhere):
- parents[i] < i for i >= 1 (topological order), depths[i] = depths[parents[i]] + 1;
- siblings carry distinct tokens (so the greedy walk has at most one child to follow).

`verify_inputs(tree, start)` is the single place that turns a tree into what the target needs:
position ids `start + depth`, the additive 4D attention mask over `[prefix (start) | tree (N+1)]`
(a node's row: its parent's, with its own entry visible; `graftlib.core.kernels.verify_blob`), the walk's edge map
(parent << EDGE_SHIFT | token -> child, `child_edges`); plain reference derivations (the visibility matrix, each
node's child map, the root-to-node paths) live in tests/reference_tree.py, against which these are tested.
`greedy_walk` accepts the longest path whose tokens equal the target's argmax tokens (exact at
temperature 0). A decode reuses one mask buffer (`MaskBuffer`) across rounds.
"""

from dataclasses import dataclass, field

import numpy as np
import torch

from graftlib.core.kernels import EDGE_SHIFT, hidden_rows, verify_blob


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

    def prefix(self, n: int) -> "Tree":
        """The first n draft nodes: of a tree built best-first (parents before children), a tree again."""
        k = n + 1
        return Tree(self.tokens[:k], self.parents[:k], self.depths[:k], self.scores[:k])


@dataclass
class VerifyInputs:
    input_ids: torch.Tensor  # [1, N+1] tree tokens (root first)
    position_ids: torch.Tensor  # [1, N+1] start + depth
    attention_mask: torch.Tensor | None  # [1, 1, N+1, start+N+1] additive; None for a chain (causal)
    edges: dict[int, int]  # edges[parent << EDGE_SHIFT | token] = child node index (`child_edges`)
    parents: list[int]


def child_edges(tokens, parents) -> dict[int, int]:
    """{parent << EDGE_SHIFT | token: child} over nodes 1..N (int64 arrays or lists): the walk's one
    dict lookup per step, built with one vectorized key computation (siblings' tokens are distinct,
    so each key names one child)."""
    tokens, parents = np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64)
    keys = (parents[1:] << EDGE_SHIFT) | tokens[1:]
    return dict(zip(keys.tolist(), range(1, len(tokens))))


class MaskBuffer:
    """A decode's additive 4D attention mask, allocated once and rewritten in place each round.

    Holds [1, 1, rows, cols] in the mask dtype on the device (rows >= N+1 of any tree, cols >= the
    longest start + N+1). `place(block, start)` writes a tree's block and returns the view
    [1, 1, n, start + n] whose last n columns are the tree block (the dtype's min where node j is hidden
    from node i, else 0) and whose first `start` columns (the cached prefix) are 0.
    Invariant: every column below `clean` is 0 in every row, and rows at or beyond `dirty` were never
    written. The columns that became prefix since the last round (the accepted nodes, `pad(start)`
    of them) are cleared by the block write itself: the caller puts that many zero columns in front of
    the block, so a round costs one copy into rows 0..n-1 (rows n..dirty-1, which an earlier, larger
    tree wrote, are cleared apart), instead of allocating and filling a fresh [n, start + n] mask.
    `hidden_bits` / `itemsize`: the dtype's min as an unsigned integer of its width, for host code that
    writes blocks as raw bytes (`graftlib.core.kernels.verify_blob`).
    In host memory (a CPU decode) the block is not copied at all: `write` has the compiled kernel write
    the rows straight into the buffer (`host`: a numpy view of its entries' bits; None on a device,
    where `place` copies an uploaded block).
    """

    def __init__(self, rows: int, cols: int, device, dtype: torch.dtype):
        self.mask = torch.zeros(1, 1, rows, cols, dtype=dtype, device=device)
        self.rows, self.cols, self.device, self.dtype = rows, cols, self.mask.device, dtype
        self.plane = self.mask[0, 0]  # [rows, cols]
        self.min = torch.finfo(dtype).min  # "not visible"
        self.itemsize = self.mask.element_size()
        bits = torch.tensor([self.min], dtype=dtype).view(UNSIGNED[self.itemsize][0])
        self.hidden_bits = int(bits) & UNSIGNED[self.itemsize][1]
        self.clean, self.dirty = cols, 0
        unsigned = {2: np.uint16, 4: np.uint32}[self.itemsize]
        on_host = self.device.type == "cpu"
        self.host = self.plane.view(UNSIGNED[self.itemsize][0]).numpy().view(unsigned) if on_host else None
        self.hidden = unsigned(self.hidden_bits)

    def fits(self, n: int, start: int, device, dtype: torch.dtype) -> bool:
        return (n <= self.rows and start + n <= self.cols and dtype == self.dtype
                and (device == self.device or torch.device(device) == self.device))

    def pad(self, start: int) -> int:
        """The zero columns a block placed at `start` carries in front: those that became prefix since
        the last round."""
        return max(start - self.clean, 0)

    def place(self, block: torch.Tensor, start: int) -> torch.Tensor:
        """`block` [n, pad(start) + n] in the mask dtype on the device (`pad(start)` zero columns, then the
        tree block: min where node j is not visible to node i, else 0) -> the mask view [1, 1, n, start + n],
        written with one copy."""
        n, width = block.shape
        if width != n + self.pad(start):
            raise ValueError(f"MaskBuffer.place: a block at {start} needs {self.pad(start)} zero columns in "
                             f"front, got {width - n}")
        if n < self.dirty and start > self.clean:
            self.plane[n:self.dirty, self.clean:start] = 0
        self.plane[:n, start + n - width:start + n].copy_(block)
        return self._view(n, start)

    def write(self, parents: np.ndarray, start: int) -> torch.Tensor:
        """The mask of a tree with `parents` (int64 [n], parents before children) placed at `start`, its rows
        written in place by the compiled kernel (`pad(start)` zero columns, then the tree block; host
        buffers only) -> the view [1, 1, n, start + n]."""
        n = parents.shape[0]
        if n < self.dirty and start > self.clean:
            self.host[n:self.dirty, self.clean:start] = 0
        pad = self.pad(start)
        hidden_rows(self.host, parents, start - pad, pad, self.hidden)
        return self._view(n, start)

    def _view(self, n: int, start: int) -> torch.Tensor:
        """Rows 0..n-1 now hold a tree placed at `start`: the bookkeeping, then the mask view (as_strided:
        the cheapest view torch makes)."""
        self.clean, self.dirty = start, max(self.dirty, n)
        return self.mask.as_strided((1, 1, n, start + n), self.mask.stride())


UNSIGNED = {2: (torch.int16, 0xFFFF), 4: (torch.int32, 0xFFFFFFFF)}  # a mask dtype's width -> its bits


def verify_inputs(tree: Tree, start: int, device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32, masks: MaskBuffer | None = None) -> VerifyInputs:
    """Derive the target's verify inputs for `tree` placed after a cached prefix of `start` tokens.

    Host work: one compiled pass over the nodes (`graftlib.core.kernels.verify_blob`: a node's mask row
    is its parent's with its own entry cleared, and the walk's edge keys). On a device, one upload: a
    byte blob of the tokens and positions (int64, [2, N+1]) followed, for a tree that is not a chain, by
    the [N+1, pad + N+1] mask block in the mask dtype; all are views of it there, and the block is
    copied into the buffer (`MaskBuffer.place`). On the CPU nothing is copied: the tokens and positions
    are views of the host blob, and the kernel writes the mask rows straight into the buffer
    (`MaskBuffer.write`). `masks`: the decode's `MaskBuffer` (the mask is a view of it); None or too
    small: a fresh mask.
    """
    n = len(tree.tokens)
    chain = max(tree.depths) == n - 1  # one path through every node: causal attention, no mask
    if not chain and (masks is None or not masks.fits(n, start, device, dtype)):
        masks = MaskBuffer(n, start + n, device, dtype)
    in_place = not chain and masks.host is not None  # a host buffer: the kernel writes its rows
    pad, bits, size = (0, 0, 0) if chain or in_place else (masks.pad(start), masks.hidden_bits, masks.itemsize)
    parents = np.asarray(tree.parents, np.int64)
    host, keys = verify_blob(np.asarray(tree.tokens, np.int64), parents, np.asarray(tree.depths, np.int64),
                             start, pad, bits, size)
    if in_place or (chain and torch.device(device).type == "cpu"):
        input_ids, position_ids = torch.from_numpy(host[:16 * n].view(np.int64).reshape(2, 1, n)).unbind()
        mask = None if chain else masks.write(parents, start)
    else:
        blob = torch.from_numpy(host).to(device)
        input_ids, position_ids = blob[:16 * n].view(torch.int64).view(2, 1, n).unbind()
        mask = None if chain else masks.place(blob[16 * n:].view(dtype).view(n, pad + n), start)
    return VerifyInputs(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                        edges=dict(zip(keys.tolist(), range(1, n))), parents=tree.parents)


def greedy_walk(edges: dict[int, int], target_next) -> tuple[list[int], int]:
    """Accept the longest root path whose next tokens are the target's argmax tokens.

    `edges`: `child_edges` of the tree (`VerifyInputs.edges`); `target_next[i]` is the target's
    token at node i (its argmax; a draw at T > 0), read only at the nodes the walk reaches.
    Returns (accepted node indices, root first; the bonus token = the target's token after the
    last accepted node).
    """
    node, accepted = 0, [0]
    nxt = target_next[0]
    while (child := edges.get(node << EDGE_SHIFT | nxt)) is not None:
        node = child
        accepted.append(node)
        nxt = target_next[node]
    return accepted, nxt


def is_leaf(parents: list[int], node: int) -> bool:
    """No node hangs under `node`. A walk that ends at a leaf accepted every node on its path and was
    stopped by the tree, not by the target: the round is censored (a larger tree might have gone on)."""
    return node not in parents


def parent_mismatch(tokens: list[int], parents: list[int], depths: list[int], last: int, bonus: int) -> bool:
    """The paper's parent-child mismatch (Figure 1): the target's next token `bonus` (t*) after the
    last accepted node `last` (p*, depth d*) is in the tree at depth d* + 1, under another parent.
    Scans only the nodes carrying t* (`list.index`, a C-level search), so a token absent from the
    tree costs one pass and no per-node Python."""
    d, i = depths[last] + 1, 0
    while True:
        try:
            i = tokens.index(bonus, i + 1)
        except ValueError:
            return False
        if depths[i] == d and parents[i] != last:
            return True
