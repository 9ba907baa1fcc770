"""DFlash 2's pairwise path selector as graftlib tree builders: its chain and its edge score in DDTree's heap.

A DFlash 2 drafter (`graftlib.models.dflash2.CandidateSelector`) scores candidate b at depth t after
predecessor a as S_t(a, b) = U_t(b) + T_t(a, b), T_t(a, b) = <A(a) * W h_t, B(b)>, h_t the drafter's final
state at depth t. `Selector` holds its tables on the host (A, B [V, r]) and projects a round's states once
(W h_t, from `Candidates.hidden`); on a round's candidate pools (per depth the draft's top-K, log q):
  - `SelectorChain` (method `dflash2`): the public walk, from the root (the round's anchor) the argmax of
    log q_t(b) + T_t(a, b) over the pool's first `top_k` entries (the unary top-k: log q differs from U_t by a
    per-depth constant), a the token chosen before; `budget` steps (at most D);
  - `Selector.transition_tables` (methods `ddtree+sel`, `ddtree+tdes+sel`): the heap's per-round child sides
    X[d, j] = W h_d * B(c_j), with which `graftlib.core.kernels.build_heap` reweights each parent's pool by
    T (the pool's draft mass kept) before any TDES term, so the heap stays exact best-first under
    log q'(c | p) (+ beta f~(p, c, d)).
A tree is fixed by the draft before the target is consulted, as for every graftlib method, so decodes stay
exact at T = 0 and keep the target's law at T > 0 (`graftlib.core.sampling`). Scores written on the chain's
nodes: running sums of log q', the selector's reweighted draft log-probabilities.
"""

import numpy as np
import torch

from graftlib.core.builders import Candidates
from graftlib.core.errors import require
from graftlib.core.tree import Tree


class Selector:
    """A DFlash 2 selector's tables on the host: A, B [V, r] float32 and W [r, H] on the drafter's device."""

    def __init__(self, A: np.ndarray, B: np.ndarray, W: torch.Tensor, top_k: int):
        self.A, self.B, self.W, self.top_k = A, B, W, top_k

    @classmethod
    def of(cls, drafter, method: str) -> "Selector":
        """The selector of `drafter` (a DFlash 2 drafter whose config has `selector_rank`)."""
        module = getattr(drafter, "candidate_selector", None)
        require(module is not None, f"{method} needs a DFlash 2 drafter with a candidate selector (selector_rank in "
                "its config's dflash_config)")

        def host(p: torch.Tensor) -> np.ndarray:
            return np.ascontiguousarray(p.detach().float().cpu().numpy())
        return cls(host(module.predecessor_codebook), host(module.successor_codebook),
                   module.hidden_projection.weight.detach(), module.top_k)

    def projected(self, cand: Candidates) -> np.ndarray:
        """W h_d [D, r] for the round's drafter states (float32, host)."""
        require(cand.hidden is not None, "the selector needs the drafter states of the round (Candidates.hidden)")
        return (cand.hidden.to(self.W.dtype) @ self.W.t()).float().numpy(force=True)

    def transition_tables(self, cand: Candidates) -> tuple[np.ndarray, np.ndarray]:
        """(A, X [D, K, r]): the heap's tables (`graftlib.core.builders.TransitionScorer`)."""
        X = self.B[cand.id_table] * self.projected(cand)[:, None, :]
        return self.A, np.ascontiguousarray(X, dtype=np.float32)


def _log_sum_exp(x: np.ndarray) -> float:
    top = float(x.max())
    return top + float(np.log(np.exp(x.astype(np.float64) - top).sum()))


class SelectorChain:
    """DFlash 2's chain: the selector's walk, `budget` drafts (at most D). Reads the first `top_k` pool entries."""

    name = "dflash2"

    def __init__(self, selector: Selector):
        self.selector = selector
        self.pool = selector.top_k

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        n = min(budget, cand.depth)
        k = min(self.pool, cand.width)
        proj = self.selector.projected(cand)
        ids, logq = cand.id_table[:n, :k], cand.logq_table[:n, :k].astype(np.float64)
        path, scores, prev, running = [], [], root_token, 0.0
        for d in range(n):
            s = logq[d] + self.selector.B[ids[d]] @ (self.selector.A[prev] * proj[d])
            j = int(np.argmax(s))
            running += float(s[j]) - _log_sum_exp(s) + _log_sum_exp(logq[d])
            prev = int(ids[d, j])
            path.append(prev)
            scores.append(running)
        tree = Tree.chain(root_token, path)
        for d, score in enumerate(scores, 1):
            tree.scores[d] = score
        return tree

    def feedback(self, record: dict) -> None:
        pass
