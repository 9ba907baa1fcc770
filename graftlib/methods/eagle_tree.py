"""EAGLE-2's dynamic draft tree, the tree EAGLE-3 drafts at inference, as a `TreePolicy`.

The policy (`graftlib.core.ar_drafting`), after the EAGLE release's `topK_genrate`
(SafeAILab/EAGLE, eagle/model/cnets.py), read for the facts, written anew:
- the root's output offers its `top_k` tokens (depth 1); every forwarded node offers its `top_k`
  tokens, each scored by the path's cumulative draft log-prob;
- expand: of the newest nodes (the children of the last forward), the `top_k` best by path log q
  are forwarded next, `depth` times, so the pool reaches depth `depth + 1`; the pool keeps every
  child (top_k at depth 1, then top_k x top_k per step), as the release's score list does;
- rerank (`build`): the `budget` best pool nodes by path log q form the verified tree. A child's
  log q is at most its parent's, so they form a tree (ties go to the earlier node, the parent).

Settings: the EAGLE-3 release's defaults (eagle/model/ea_model.py, `EaModel.from_pretrained(
use_eagle3=True, total_token=60, depth=7, top_k=10, threshold=1.0)`): depth 7, top_k 10 and
total_token 60, which counts the root (the release keeps `total_token - 1` drafts), hence
`RELEASE_BUDGET` = 59 draft nodes in graftlib's budget (root excluded). The release's
`threshold` is not read by its dynamic tree, so it has no counterpart here. A budget above the
pool (top_k + depth x top_k^2 = 710 nodes at the defaults) verifies the whole pool.
"""

from dataclasses import dataclass

from graftlib.core.ar_drafting import DraftPool, KeepBest

RELEASE_BUDGET = 59  # total_token 60 minus the root


@dataclass(frozen=True)
class EagleTree(KeepBest):
    depth: int = 7  # forwards after the first depth (the release's `depth`)
    top_k: int = 10  # children per forwarded node, and the frontier width
    name: str = "eagle3"

    @property
    def max_depth(self) -> int:
        return self.depth + 1

    def children(self, budget: int) -> int:
        return self.top_k

    def expand(self, pool: DraftPool, new: list[int], budget: int) -> list[int]:
        if pool.depths[new[0]] > self.depth:
            return []
        return pool.best(self.top_k, new)

    def settings(self, budget: int) -> dict:
        """The release's names for this run's tree settings (total_tokens counts the root)."""
        return {"depth": self.depth, "top_k": self.top_k, "total_tokens": budget + 1}
