"""The plain best-first heap the library's compiled one (`graftlib.core.kernels.build_heap`, behind
`HeapTreeBuilder`) is tested against: DDTree's heap over prefixes (eq. 3), or, with an edge score
`score(parent_token, depth, child_ids, logq) -> [K]`, the heap ranked by that score (TDES, eq. 13).

Written for reading, not speed. A heap entry is a parent's next-best child not yet taken: popping it
adds that child, then pushes the parent's next sibling and the new node's best child, so prefixes
come out in exact best-first order of the path score; ties are broken by push order. A node's
children are ranked once, stably in descending order of their edge score."""

import heapq

import numpy as np

from graftlib.core.tree import Tree


def ranking(scores) -> tuple[list[int], list[float]]:
    """(pool indices by descending score, stable; their scores in that order)."""
    scores = np.asarray(scores, np.float64)
    order = np.argsort(-scores, kind="stable").tolist()
    return order, [float(scores[j]) for j in order]


def reference_heap(root_token: int, cand, budget: int, score=None) -> Tree:
    """The tree of at most `budget` nodes (root not counted) over `cand` (`graftlib.core.builders.Candidates`);
    `score`: an edge score as above (a TDES scorer's `child_scores`), None for DDTree's log q."""
    if cand.depth == 0 or budget <= 0:
        return Tree.root_only(root_token)
    ids, logq = cand.ids, cand.logq

    def kids(token: int, depth: int) -> tuple[list[int], list[float]]:
        row = logq[depth - 1] if score is None else score(token, depth, ids[depth - 1], logq[depth - 1])
        return ranking(row)

    tokens, parents, depths, scores = [root_token], [-1], [0], [0.0]
    ranked = [kids(root_token, 1)]
    heap, counter = [(-ranked[0][1][0], 0, 0, 0)], 1  # (-path score, push order, parent, rank)
    while heap and len(tokens) - 1 < budget:
        neg, _, parent, rank = heapq.heappop(heap)
        depth = depths[parent] + 1
        order, edge = ranked[parent]
        node = len(tokens)
        tokens.append(ids[depth - 1][order[rank]])
        parents.append(parent)
        depths.append(depth)
        scores.append(-neg)
        if rank + 1 < len(order):  # the parent's next-best child
            heapq.heappush(heap, (-scores[parent] - edge[rank + 1], counter, parent, rank + 1))
            counter += 1
        if depth < cand.depth and node < budget:  # the new node's best child
            ranked.append(kids(tokens[node], depth + 1))
            heapq.heappush(heap, (neg - ranked[node][1][0], counter, node, 0))
            counter += 1
        else:
            ranked.append(None)
    return Tree(tokens, parents, depths, scores)
