"""A drafter of calibrated strength: a block-parallel drafter's marginals moved toward the target's own.

The paper's claims depend on how much its drafter accepts (Qwen3-8B's DFlash drafter: chain MAT 5.8
on GSM8K), which a drafter trained on a 2-core CPU does not reach. This construction stands in for
a stronger drafter of the same kind. At T = 0 a decode follows greedy AR's tokens, so the target's
next-token distribution p_j at every position j of the decode is known from the one causal pass a
walked decode makes anyway (`graftlib.core.walked.Continuation.hidden`). A drafter of strength s in
[0, 1] drafts, at depth d of a block whose root sits at position `start`, the mixture

    q_s,d = (1 - s) q_d + s p_{start + d - 1}        (over the draft vocabulary, p renormalized to it)

where q_d is the real drafter's marginal. s = 0 is the real drafter; s = 1 a drafter that knows the
target's distribution at every position of the greedy path. Why a mixture in probability: it is the
law of a drafter that, position by position, knows the target's distribution with probability s and
otherwise guesses as the real one; its top-1 turns to the target's token first where the target is
confident, as a better drafter's does; and every token the real drafter proposes keeps its place in
the pool, so the trees' alternatives stay the drafter's.

Kept from a real DFlash drafter: one marginal per depth for the whole block, conditioned on the greedy
path, so a wrong sibling's children are drawn from the greedy path's next marginal (the parent-child
mismatch TDES scores). What it cannot represent: (1) after the greedy path leaves the drafter's own
spine (its top-1 wrong, the true token a sibling), a real drafter's next marginal still follows its
spine while p follows the true path, so the construction continues a sibling better than a real
drafter does (`graftlib.lab.strength.continuation_rates` measures both); (2) the real drafter's
hidden states (SABA's state, TDES's inputs) are the real drafter's; (3) it exists only along a known
greedy continuation: walked decodes (modeled figures only, never wall clock), or a verified decode
handed the continuation for an exactness test. Exactness is untouched: the target still verifies
every token, so a verified decode equals AR whatever the drafts are.
"""

import torch

from graftlib.core.errors import GraftError, require

MIN_PROB = 1e-30  # log of an exact zero of the mixture (a token neither side can propose)


class StrengthDrafter:
    """The drafter `base` at strength `s` (module doc); the `Drafter` protocol by delegation, with
    `draft_logits` mixed. `follow(continuation, lm_head)` hands it the decode's greedy continuation."""

    def __init__(self, base, s: float):
        require(0.0 <= s <= 1.0, f"drafter strength s={s!r}: must lie in [0, 1]")
        self.base, self.s = base, float(s)
        self._start: int | None = None
        self._hidden: torch.Tensor | None = None  # the continuation's target hidden states [N, H]
        self._head: torch.Tensor | None = None  # the target's LM head rows of the draft vocabulary [V_draft, H]

    def __getattr__(self, name):  # config, block_size, id_map, context_features, new_cache, head_weight, ...
        return getattr(self.base, name)

    def follow(self, continuation, lm_head: torch.Tensor) -> None:
        """Draft along `continuation` (`graftlib.core.walked.Continuation`: its `hidden` gives p at every position)."""
        require(continuation.hidden is not None, "the continuation carries no target hidden states")
        self._hidden = continuation.hidden
        id_map = self.base.id_map
        self._head = lm_head[id_map] if id_map is not None else lm_head

    def __call__(self, noise_embedding, target_hidden, start: int, cache=None):
        self._start = start
        return self.base(noise_embedding, target_hidden, start, cache)

    def draft_logits(self, hidden: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor:
        """log q_s,d for the D rows of `hidden` (depths 1..D of the block drafted last); a depth past the
        continuation keeps the real drafter's marginal."""
        logits = self.base.draft_logits(hidden, head_weight)
        if self.s == 0.0:
            return logits
        if self._hidden is None or self._start is None:
            raise GraftError(f"a drafter of strength {self.s:g} drafts along a known greedy continuation: decode it "
                             "walked (graft bench --walk), or hand it one (`follow`)")
        q = torch.softmax(logits.float(), dim=-1)
        rows = torch.arange(self._start, self._start + q.shape[0], device=q.device)  # p_{start + d - 1}, d = 1..D
        known = rows < self._hidden.shape[0]
        p = torch.softmax(self._hidden[rows[known]].float() @ self._head.float().T, dim=-1)
        mixed = q.clone()
        mixed[known] = (1.0 - self.s) * q[known] + self.s * p
        return torch.log(mixed.clamp_min(MIN_PROB))
