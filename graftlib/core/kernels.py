"""Compiled host kernels (numba) of a speculative round: the draft-tree heap, with a bilinear edge scorer
inside it (DDTree eq. 3; TDES eqs. 4-5, 13), and the verify blob.

`HeapTreeBuilder` (graftlib.core.builders) calls the heap, one compiled call per round (library and Python
calls cost microseconds each on a CPU after a forward); its plain reference is `tests/reference_heap.py`.

`build_heap(root, ids, logq, budget, depth_limit, tables)` -> (tokens, parents, depths, scores, n): the first n
nodes are the tree (root first, parents before children). `ids`, `logq` [D, K]: the draft's per-depth pools,
best first. `tables` (`HeapTables`): what a method adds to DDTree's pools (empty where it adds nothing):
TDES's bilinear sides `tdes_parent` [V, M], `tdes_depth` [D', M], `tdes_child` [V, M], giving child c_j of
parent p at depth d the score
    S_j = log q_d[j] + f_j - mean_j' f_j',  f_j = tdes_child[c_j] . (tdes_parent[p] + tdes_depth[d - 1])
= log q_{t,d}(c) + beta f~(p, c, d) (eqs. 4-5, 13); and a DFlash 2 selector's `selector_prev` [V, R],
`selector_next` [D, K, R], which first redistribute parent p's pool mass by the transition score T(p, c_j).
The heap pops in exact best-first order, ties by push order, as DDTree's does; `verify_blob` and
`gather_positions` build the verify upload and the host cache's commit; compiled code is cached on disk.

Details: docs/internals.md, `graftlib.core.kernels`.
"""

import functools
from typing import NamedTuple

import numba
import numpy as np

EDGE_SHIFT = 32  # a walk's edge key: parent << EDGE_SHIFT | token (token ids < 2^32); the one definition


class HeapTables(NamedTuple):
    """The compiled heap's edge-score inputs (module doc): DDTree's heap reads none, TDES's tables make it
    GRAFT's edge scoring, the selector's DFlash 2's; an empty array (`heap_tables`) leaves its term out."""
    tdes_parent: np.ndarray  # [V, M] float32: TDES's parent side [k P | 1]
    tdes_depth: np.ndarray  # [D', M] float32: TDES's depth offsets [k u | 0]
    tdes_child: np.ndarray  # [V, M] float32: TDES's child side [C | 0]
    selector_prev: np.ndarray  # [V, R] float32: the selector's predecessor codebook
    selector_next: np.ndarray  # [D, K, R] float32: the selector's child sides of this round


NO_TDES = (np.zeros((0, 0), np.float32),) * 3
NO_SELECTOR = (np.zeros((0, 0), np.float32), np.zeros((0, 0, 0), np.float32))


def heap_tables(tdes: tuple | None = None, selector: tuple | None = None) -> HeapTables:
    """`HeapTables` from TDES's (parent, depth, child) tables and a selector's (prev, next), each None if absent."""
    return HeapTables(*(tdes or NO_TDES), *(selector or NO_SELECTOR))


@numba.njit(cache=True)
def _less(keys, counts, a, b) -> bool:
    """Heap entry a before b: lower key (-path score), then lower push counter."""
    return keys[a] < keys[b] or (keys[a] == keys[b] and counts[a] < counts[b])


@numba.njit(cache=True)
def _swap(keys, counts, owners, picks, a, b) -> None:
    keys[a], keys[b] = keys[b], keys[a]
    counts[a], counts[b] = counts[b], counts[a]
    owners[a], owners[b] = owners[b], owners[a]
    picks[a], picks[b] = picks[b], picks[a]


@numba.njit(cache=True)
def _push(keys, counts, owners, picks, size, entry) -> int:
    """Append `entry` = (key, push counter, owner node, pick) and sift it up; returns the new size."""
    i = size
    keys[i], counts[i], owners[i], picks[i] = entry
    while i > 0:
        up = (i - 1) >> 1
        if not _less(keys, counts, i, up):
            break
        _swap(keys, counts, owners, picks, i, up)
        i = up
    return size + 1


@numba.njit(cache=True)
def _pop(keys, counts, owners, picks, size) -> int:
    """Move the first entry to slot `size - 1` (read it there) and restore the heap; returns the new size."""
    last = size - 1
    _swap(keys, counts, owners, picks, 0, last)
    i = 0
    while True:
        left = 2 * i + 1
        if left >= last:
            break
        best = left
        if left + 1 < last and _less(keys, counts, left + 1, left):
            best = left + 1
        if not _less(keys, counts, best, i):
            break
        _swap(keys, counts, owners, picks, i, best)
        i = best
    return last


@numba.njit(cache=True, fastmath=True)
def _score_row(ids, logq, tables, token, d, out) -> None:
    """out[j] = base_j + f_j - mean_j' f_j' with f_j = tdes_child[ids[d, j]] . (tdes_parent[token] + tdes_depth[d])
    over the first M - 1 columns (the last one carries log q: 0 in the child side), the edge scores of
    `token`'s children at pool index d (eqs. 4-5; float32 dot products, which the compiler may sum in any fixed
    order); base_j = log q_d[j], reweighted by a selector's tables when given (`_reweight`); no TDES: out = base."""
    K = ids.shape[1]
    for j in range(K):
        out[j] = logq[d, j]
    if tables.selector_prev.shape[0] > 0:
        _reweight(tables.selector_prev, tables.selector_next, token, d, out)
    P1, u0, C0 = tables.tdes_parent, tables.tdes_depth, tables.tdes_child
    if P1.shape[0] == 0:
        return
    m = C0.shape[1] - 1
    y = np.empty(m, np.float32)
    for col in range(m):
        y[col] = P1[token, col] + u0[d, col]
    f = np.empty(K, np.float32)
    total = np.float32(0.0)
    for j in range(K):
        c = ids[d, j]
        acc = np.float32(0.0)
        for col in range(m):
            acc += C0[c, col] * y[col]
        f[j] = acc
        total += acc
    mean = total / np.float32(K)
    for j in range(K):
        out[j] = out[j] + (f[j] - mean)


def edge_scores(ids, logq, tables: HeapTables, token: int, d: int) -> np.ndarray:
    """The edge scores the heap gives `token`'s children at pool row d (`_score_row`), float32 [K]: the same compiled
    code, for callers outside the heap."""
    out = np.empty(ids.shape[1], np.float32)
    _score_row(ids, logq, tables, token, d, out)
    return out


@numba.njit(cache=True, fastmath=True)
def _reweight(A, X, token, d, row) -> None:
    """row (log q_d over the pool) <- log q'_d of the module doc: g_j = A[token] . X[d, j] added, then the
    row shifted so its log-sum-exp is unchanged (float64 sums)."""
    K, R = X.shape[1], X.shape[2]
    g = np.empty(K, np.float64)
    top_q, top_g = -np.inf, -np.inf
    for j in range(K):
        acc = np.float32(0.0)
        for r in range(R):
            acc += A[token, r] * X[d, j, r]
        g[j] = np.float64(row[j]) + np.float64(acc)
        top_q, top_g = max(top_q, np.float64(row[j])), max(top_g, g[j])
    sum_q, sum_g = 0.0, 0.0
    for j in range(K):
        sum_q += np.exp(np.float64(row[j]) - top_q)
        sum_g += np.exp(g[j] - top_g)
    shift = (top_q + np.log(sum_q)) - (top_g + np.log(sum_g))
    for j in range(K):
        row[j] = np.float32(g[j] + shift)


@numba.njit(cache=True)
def _next_child(row, prev) -> int:
    """The pool index ranked right after `prev` in `row`'s stable descending order (score down, then
    pool index up): the best entry below prev's score, or at its score with a higher index."""
    s = row[prev]
    pick = -1
    for j in range(row.shape[0]):
        v = row[j]
        if (v < s or (v == s and j > prev)) and (pick < 0 or v > row[pick]):
            pick = j
    return pick


@numba.njit(cache=True)
def build_heap(root, ids, logq, budget, depth_limit, tables):
    """The best-first tree of at most `budget` draft nodes and depth `depth_limit` (module doc; `tables`:
    `HeapTables`)."""
    D, K = ids.shape
    scored = tables.tdes_parent.shape[0] > 0 or tables.selector_prev.shape[0] > 0
    n_max = budget + 1
    tokens = np.empty(n_max, np.int64)
    parents = np.empty(n_max, np.int64)
    depths = np.empty(n_max, np.int64)
    scores = np.empty(n_max, np.float64)
    taken = np.zeros(n_max, np.int64)  # per node: children added so far
    rows = np.empty((n_max if scored else 0, K), np.float32)  # per node: its children's scores by pool index
    cap = 2 * n_max + 1
    keys = np.empty(cap, np.float64)
    counts = np.empty(cap, np.int64)
    owners = np.empty(cap, np.int64)
    picks = np.empty(cap, np.int64)  # the entry's child: its pool index

    tokens[0], parents[0], depths[0], scores[0] = root, -1, 0, 0.0
    n = 1
    if D == 0 or budget <= 0:
        return tokens, parents, depths, scores, n
    j = _first_child(0, root, 0, ids, logq, tables, rows, scored)
    first = np.float64(logq[0, j]) if not scored else np.float64(rows[0, j])
    size = _push(keys, counts, owners, picks, 0, (-first, 0, 0, j))
    counter = 1
    while size > 0 and n - 1 < budget:
        size = _pop(keys, counts, owners, picks, size)
        neg, parent, index = keys[size], owners[size], picks[size]
        node = n
        depth = depths[parent] + 1
        tokens[node], parents[node], depths[node], scores[node] = ids[depth - 1, index], parent, depth, -neg
        n += 1
        taken[parent] += 1
        if taken[parent] < K:  # next sibling: same parent, next-best child
            if not scored:
                j = index + 1  # the pool's own order
                nxt = np.float64(logq[depth - 1, j])
            else:
                j = _next_child(rows[parent], index)
                nxt = np.float64(rows[parent, j])
            size = _push(keys, counts, owners, picks, size, (-scores[parent] - nxt, counter, parent, j))
            counter += 1
        if depth < depth_limit and n - 1 < budget:  # first child of the new node
            j = _first_child(node, tokens[node], depth, ids, logq, tables, rows, scored)
            first = np.float64(logq[depth, j]) if not scored else np.float64(rows[node, j])
            size = _push(keys, counts, owners, picks, size, (neg - first, counter, node, j))
            counter += 1
    return tokens, parents, depths, scores, n


@numba.njit(cache=True)
def _first_child(node, token, d, ids, logq, tables, rows, scored) -> int:
    """The pool index of `node`'s best child at depth d + 1 (pool index d); with a scorer its children's
    row is scored and kept. DDTree's is the pool's first."""
    if not scored:
        return 0
    _score_row(ids, logq, tables, token, d, rows[node])
    return np.argmax(rows[node])  # the first maximum: ties to the lower pool index


@numba.njit(cache=True)
def verify_blob(tokens, parents, depths, start, pad, hidden_bits, itemsize):
    """(blob, keys) of a tree (int64 node arrays, parents before children) placed after `start` cached
    positions. `blob` uint8 = the tokens and position ids `start + depth` (int64, [2, n]), then, when
    `itemsize` is 2 or 4 (0: a chain, no mask), the mask block [n, pad + n] as that many bytes per entry:
    `pad` zero columns, then `hidden_bits` (the mask dtype's "not visible" value, as an unsigned
    integer) where node j is neither node i nor one of its ancestors, else 0; row i is its parent's
    with entry i cleared. `keys` [n - 1] int64: the walk's edge keys `parent << EDGE_SHIFT | token` of nodes
    1..n-1. `graftlib.core.tree.verify_inputs` uploads the blob once and views the parts on the device."""
    n = tokens.shape[0]
    width = pad + n
    body = n * width * itemsize
    words = np.zeros(2 * n + (body + 7) // 8, np.int64)
    for i in range(n):
        words[i] = tokens[i]
        words[n + i] = start + depths[i]
    keys = np.empty(max(n - 1, 0), np.int64)
    for i in range(1, n):
        keys[i - 1] = (parents[i] << EDGE_SHIFT) | tokens[i]
    if itemsize == 2:
        hidden_rows(words[2 * n:].view(np.uint16)[:n * width].reshape(n, width), parents, 0, pad,
                     np.uint16(hidden_bits))
    elif itemsize == 4:
        hidden_rows(words[2 * n:].view(np.uint32)[:n * width].reshape(n, width), parents, 0, pad,
                     np.uint32(hidden_bits))
    return words.view(np.uint8)[:16 * n + body], keys


@numba.njit(cache=True)
def hidden_rows(plane, parents, col, pad, hidden) -> None:
    """The mask block of `verify_blob`, into rows 0..n-1 and columns col..col + pad + n - 1 of `plane`
    (2D, C order, entries as the mask dtype's bits): `pad` zeros, then row i = its parent's row with
    entry pad + i cleared; the root's row hides every other node. `graftlib.core.tree.MaskBuffer.write`
    writes a host mask buffer's rows with it in place."""
    n = parents.shape[0]
    end = col + pad + n
    plane[0, col:col + pad + 1] = 0
    plane[0, col + pad + 1:end] = hidden
    for i in range(1, n):
        plane[i, col:end] = plane[parents[i], col:end]
        plane[i, col + pad + i] = 0


@numba.njit(cache=True)
def gather_positions(buf, start, keep) -> None:
    """In place over `buf` [P, capacity, d] (positions on axis 1, entries as integers of their width): position
    start + keep[j] moved to start + j for every j and plane. `keep` ascends with keep[j] >= j (an accepted
    root path, parents before children), so a position is read before any write lands on it
    (`graftlib.core.kvcache.SharedKV.gather`, host buffers)."""
    for p in range(buf.shape[0]):
        for j in range(keep.shape[0]):
            if keep[j] != j:
                buf[p, start + j, :] = buf[p, start + keep[j], :]


@functools.cache
def warm_up() -> None:
    """Compile (or load from numba's disk cache) the kernels for the types a decode passes them: packed
    read-back pools (int32 ids and float32 log q, strided views) with and without edge-score tables, and
    the verify blob, mask rows and the cache commit's gather. Once per process, before anything is timed: the first call
    of a kernel otherwise compiles inside a decode (seconds on a fresh install, tens of ms from the cache)."""
    packed = np.zeros((2, 9), np.float32)
    ids, logq = packed.view(np.int32)[:, :4], packed[:, 4:8]
    ids[:] = np.arange(8, dtype=np.int32).reshape(2, 4)
    tdes = (np.zeros((8, 3), np.float32), np.zeros((2, 3), np.float32), np.zeros((8, 3), np.float32))
    selector = (np.zeros((8, 2), np.float32), np.zeros((2, 4, 2), np.float32))
    for scorer in (None, tdes):
        for sel in (None, selector):
            build_heap(1, ids, logq, 3, 2, heap_tables(scorer, sel))
        tokens, parents, depths, _, n = build_heap(1, ids, logq, 3, 2, heap_tables(scorer))
        verify_blob(tokens[:n], parents[:n], depths[:n], 5, 1, 1, 4)
        verify_blob(tokens[:n], parents[:n], depths[:n], 5, 1, 1, 2)
        for bits in (np.uint16, np.uint32):
            hidden_rows(np.zeros((4, 8), bits), parents[:n], 1, 1, bits(1))
    for width in (np.int16, np.int32):
        gather_positions(np.zeros((2, 8, 3), width), 1, np.array([0, 2], np.int64))
