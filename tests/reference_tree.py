"""Plain reference derivations of a tree's structure, which the package's compiled ones are tested against: the
root-to-node paths (Medusa/EAGLE "retrieve indices"), the visibility matrix (node i sees j iff j is i or one of
its ancestors), each node's child map from the walk's edge keys, and the ancestors listed by level."""

import numpy as np
import torch

from graftlib.core.tree import EDGE_SHIFT


def paths(parents) -> list[list[int]]:
    """paths[i] = node indices root..i."""
    out: list[list[int]] = []
    for i, p in enumerate(parents):
        out.append([i] if p < 0 else out[p] + [i])
    return out


def visible(parents) -> torch.Tensor:
    """[N+1, N+1] bool: visible[i, j] = j is i or an ancestor of i."""
    n = len(parents)
    out = torch.zeros(n, n, dtype=torch.bool)
    for i, path in enumerate(paths(parents)):
        out[i, path] = True
    return out


def children(edges: dict[int, int], n: int) -> list[dict[int, int]]:
    """children[i][token] = child node index, from the walk's edge keys (parent << EDGE_SHIFT | token)."""
    out: list[dict[int, int]] = [{} for _ in range(n)]
    for key, child in edges.items():
        out[key >> EDGE_SHIFT][key & ((1 << EDGE_SHIFT) - 1)] = child
    return out


def ancestor_levels(parents, max_depth: int) -> np.ndarray:
    """[max_depth + 1, N+1]: row k holds every node's ancestor k levels up (the root stands in above the root)."""
    up = np.array(parents, dtype=np.int64)
    up[0] = 0
    levels = np.empty((max_depth + 1, len(up)), dtype=np.int64)
    levels[0] = np.arange(len(up))
    for k in range(1, max_depth + 1):
        np.take(up, levels[k - 1], out=levels[k])
    return levels


def ancestor_matrix(parents, max_depth: int | None = None) -> torch.Tensor:
    """`visible` by pointer jumping over `ancestor_levels` (the two references agree)."""
    n = len(parents)
    levels = ancestor_levels(parents, max_depth if max_depth is not None else n - 1)
    out = np.zeros((n, n), dtype=bool)
    out[levels[0], levels] = True
    return torch.from_numpy(out)
