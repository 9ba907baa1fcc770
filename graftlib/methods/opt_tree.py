"""OPT-Tree: the draft tree of most expected accepted tokens, grown while a step still pays.

The policy (`graftlib.core.ar_drafting`), after the release (Jikai0Wang/OPT-Tree,
opt_classic/tree.py and opt_eagle/cnets.py), read for the facts, written anew:
- the objective of a tree T is E(T) = sum over its draft nodes of the path's draft probability,
  the expected number of accepted drafts if the target followed the draft distribution; with
  `nodes` = budget, the best tree of the pool is its `nodes` most probable nodes (`build`);
- every forwarded node offers its `nodes` best tokens; of the newest nodes (depth d) the `nodes`
  most probable form depth d's layer, which is forwarded next (the only depth-d nodes the best
  tree can use);
- stop: when the layer raises E(best tree) by at most `threshold`
  (E(best of depths <= d) - E(best of depths <= d - 1) <= threshold), or at depth `max_depth`.
The release decides one step later: it forwards depth d's layer before judging that layer's gain
and then drops the children that forward produced; here the gain of depth d is judged as soon as
depth d's candidates exist, and the final tree may use them, so no forward is wasted. Weights are
probabilities (exp of the path log q) as in the release.

Settings: the release's defaults (evaluation/eval_opt_eagle.py and eval_opt_classic.py:
`--nodes 50 --threshold 0.5 --max_depth 10`; its README's example commands pass `--nodes 60`),
so `RELEASE_BUDGET` = 50 draft nodes (OPT-Tree's `nodes` do not count the root either).
"""

from dataclasses import dataclass

from graftlib.core.ar_drafting import DraftPool, KeepBest

RELEASE_BUDGET = 50  # nodes


@dataclass(frozen=True)
class OptTree(KeepBest):
    threshold: float = 0.5  # least gain in expected accepted drafts that pays for another depth
    max_depth: int = 10
    name: str = "opt-tree"

    def children(self, budget: int) -> int:
        return budget

    def expand(self, pool: DraftPool, new: list[int], budget: int) -> list[int]:
        layer = pool.best(budget, new)
        gain = pool.mass(budget, pool.forwarded + layer) - pool.mass(budget, pool.forwarded)
        if gain <= self.threshold or pool.depths[new[0]] >= self.max_depth:
            return []
        return layer

    def settings(self, budget: int) -> dict:
        """The release's names for this run's tree settings."""
        return {"nodes": budget, "threshold": self.threshold, "max_depth": self.max_depth}
