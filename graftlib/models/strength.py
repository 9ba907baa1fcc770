"""A drafter of calibrated strength: a block-parallel drafter's marginals moved toward the target's own.

The paper's claims depend on how much its drafter accepts (Qwen3-8B's DFlash drafter: chain MAT 5.8
on GSM8K), which a drafter trained on a 2-core CPU does not reach. This construction stands in for
a stronger drafter of the same kind. At T = 0 a decode follows greedy AR's tokens, so the target's
next-token distribution p_j at every position j of the decode is known from the one causal pass a
walked decode makes anyway (`graftlib.core.ar_path.Continuation.hidden`). A drafter of strength s in
[0, 1] drafts, at depth d of a block whose root sits at position `start`, the mixture

    q_s,d  proportional to  ((1 - s) q_d + s p_{start + d - 1}) ^ (1 / tau)

over the draft vocabulary (p renormalized to it), where q_d is the real drafter's marginal. s = 0,
tau = 1 is the real drafter; s = 1 a drafter that knows the target's distribution at every position
of the greedy path. Why a mixture in probability: it is the law of a drafter that, position by
position, knows the target's distribution with probability s and otherwise guesses as the real one;
its top-1 turns to the target's token first where the target is confident, as a better drafter's
does; and every token the real drafter proposes keeps its place in the pool, so the trees'
alternatives stay the drafter's. Why the temperature: a mixture is less confident than it is right
(its top-1 holds about s of the mass where the real drafter was wrong), while a drafter trained by
cross-entropy is about as confident as it is right, and DDTree's heap ranks paths by these
probabilities. tau does not move any top-1, so the chain's acceptance depends on s alone; s is fitted
to the paper's chain and tau so that the mean top-1 probability equals the top-1 accuracy
(`graftlib.lab.run.strength`). `trace`, when a list, collects each block's top probabilities before the
temperature and whether its top-1 is the greedy token, for that fit.

Kept from a real DFlash drafter: one marginal per depth for the whole block, conditioned on the greedy
path, so a wrong sibling's children are drawn from the greedy path's next marginal (the parent-child
mismatch TDES scores). What it cannot represent: (1) after the greedy path leaves the drafter's own
spine (its top-1 wrong, the true token a sibling), a real drafter's next marginal still follows its
spine while p follows the true path, so the construction continues a sibling better than a real
drafter does (`graftlib.lab.run.strength.continuation_rates` measures both); (2) the real drafter's
hidden states (SABA's state, TDES's inputs) are the real drafter's; (3) it exists only along a known
greedy continuation: walked decodes (modeled figures only, never wall clock), or a verified decode
handed the continuation for an exactness test. Exactness is untouched: the target still verifies
every token, so a verified decode equals AR whatever the drafts are.
"""

import torch

from graftlib.core.errors import GraftError, require

MIN_PROB = 1e-30  # log of an exact zero of the mixture (a token neither side can propose)
TRACE_TOP = 256  # the mixture's top probabilities a trace keeps per depth (the temperature fit's sum)


class StrengthDrafter:
    """The drafter `base` at strength `s` (module doc); the `Drafter` protocol by delegation, with
    `draft_logits` mixed. `follow(continuation, lm_head)` hands it the decode's greedy continuation."""

    def __init__(self, base, s: float, tau: float = 1.0):
        require(0.0 <= s <= 1.0, f"drafter strength s={s!r}: must lie in [0, 1]")
        require(tau > 0.0, f"drafter temperature tau={tau!r}: must be > 0")
        self.base, self.s, self.tau = base, float(s), float(tau)
        self.trace: list | None = None
        self._start: int | None = None
        self._continuation = None  # the decode's greedy continuation (its `hidden`: the target's states [N, H])
        self._head: torch.Tensor | None = None  # the target's LM head rows of the draft vocabulary [V_draft, H]

    def __getattr__(self, name):  # config, block_size, id_map, context_features, new_cache, head_weight, ...
        return getattr(self.base, name)

    def follow(self, continuation, lm_head: torch.Tensor) -> None:
        """Draft along `continuation` (`graftlib.core.ar_path.Continuation`: its `hidden` gives p at every position)."""
        require(continuation.hidden is not None, "the continuation carries no target hidden states")
        self._continuation = continuation
        id_map = self.base.id_map
        self._head = lm_head[id_map] if id_map is not None else lm_head

    def __call__(self, noise_embedding, target_hidden, start: int, cache=None):
        self._start = start
        return self.base(noise_embedding, target_hidden, start, cache)

    def draft_logits(self, hidden: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor:
        """log q_s,d for the D rows of `hidden` (depths 1..D of the block drafted last); a depth past the
        continuation keeps the real drafter's marginal."""
        logits = self.base.draft_logits(hidden, head_weight)
        if self.s == 0.0 and self.tau == 1.0 and self.trace is None:
            return logits
        mixed = torch.softmax(logits.float(), dim=-1)
        if self.s > 0.0 or self.trace is not None:
            if self._continuation is None or self._start is None:
                raise GraftError(f"a drafter of strength {self.s:g} drafts along a known greedy continuation: decode "
                                 "it walked (graft bench --walk), or hand it one (`follow`)")
            rows = torch.arange(self._start, self._start + mixed.shape[0], device=mixed.device)  # p_{start + d - 1}
            states = self._continuation.hidden
            known = rows < states.shape[0]
            if self.s > 0.0:
                p = torch.softmax(states[rows[known]].float() @ self._head.float().T, dim=-1)
                mixed[known] = (1.0 - self.s) * mixed[known] + self.s * p
            if self.trace is not None:
                self._record(mixed)
        return torch.log(mixed.clamp_min(MIN_PROB)) / self.tau

    def _record(self, mixed: torch.Tensor) -> None:
        """Append (top probabilities [D, TRACE_TOP], top-1 right [D]) of this block before the temperature; a
        depth past the continuation counts as wrong."""
        top, ids = torch.topk(mixed, min(TRACE_TOP, mixed.shape[-1]), dim=-1)
        id_map = self.base.id_map
        first = (id_map[ids[:, 0]] if id_map is not None else ids[:, 0]).tolist()
        cont = self._continuation
        right = [first[d] == cont.at(self._start + d + 1) for d in range(len(first))]
        self.trace.append((top.cpu(), torch.tensor(right)))
