"""Walked decoding: a speculative decode at T = 0 whose verify step is a walk along the known greedy output.

At T = 0 every method emits greedy AR's tokens, so a decode's rounds (trees, accepted lengths, budgets,
mismatches) are fixed by the prompt, the drafter and the method; only their seconds depend on the machine.
`WalkedLoop` computes those rounds without verifying a tree: greedy AR's continuation (given, extended to
`max_new_tokens + block_size` tokens), one causal target forward over prompt + continuation for the
features a verify would hand the drafter, and per round the gate, the real draft, the budget choice and the
tree as ever, accepting by the walk of the tree along the continuation (`tree.greedy_walk`). A drafter
with a `follow(continuation, lm_head, target)` method (`graftlib.models.strength`) is handed the continuation
first. The records carry no verify times: throughput comes from a cost profile, never from wall clock.

Invariants: T = 0 only; the emitted tokens are the continuation's (exact by construction, so a
walked decode is no exactness test); its rounds equal a verified decode's wherever the teacher-forced
features equal the verify's up to rounding that moves no drafter top-k (tests/test_walked.py checks
the rounds against `DecodeLoop.decode` on tiny models and on the embedded pair).

Details: docs/internals.md, `graftlib.core.ar_path`.
"""

import torch

from graftlib.core.builders import Candidates
from graftlib.core.decode import DecodeLoop, DecodeResult, RoundOutcome, RoundRecord, SpecState
from graftlib.core.errors import require
from graftlib.core.kvcache import target_cache
from graftlib.core.timing import StageTimer
from graftlib.core.tree import child_edges, greedy_walk
from graftlib.core.verify import LazyArgmax, target_forward


class Continuation:
    """The greedy tokens after the prompt and the target's features at every position of prompt + them."""

    def __init__(self, tokens: list[int], features: torch.Tensor, prompt_len: int, hidden: torch.Tensor | None = None,
                 prompt: tuple[int, ...] = (), cache=None):
        self.prompt = prompt  # the prompt's ids
        self.tokens = tokens  # tokens[i] sits at position prompt_len + i
        self.features = features  # [1, prompt_len + len(tokens), F]
        self.prompt_len = prompt_len
        self.hidden = hidden  # [prompt_len + len(tokens), H]: the target's last hidden state at every position
        self.cache = cache  # the target's KV cache over prompt + tokens (a drafter may query it off the path)

    def at(self, position: int) -> int:
        """The token at `position` (>= prompt_len); -1 past an EOS that ended the continuation (no tree
        node carries it, so a walk stops there, and the decode has stopped at the EOS before)."""
        i = position - self.prompt_len
        return self.tokens[i] if i < len(self.tokens) else -1


class WalkedLoop(DecodeLoop):
    """`DecodeLoop` with verify replaced by a walk along the greedy continuation (module doc)."""

    @torch.inference_mode()
    def continuation(self, prompt_ids: list[int], tokens: list[int], length: int) -> Continuation:
        """`tokens` (greedy AR's first ones; may be empty) extended by one-token greedy steps, as the AR
        baseline takes them, to `length` tokens (fewer if an EOS ends them), with the target's features
        at every position: one causal pass over prompt + `tokens`, then one per added token (`tokens`
        must be greedy AR's: they are taken as given)."""
        require(self.sampling.greedy, "a walked decode follows the greedy continuation: T = 0 only")
        n = len(prompt_ids)
        seq = list(prompt_ids) + list(tokens[:length])
        cache = target_cache(self.target.config, n + length + 1, shared=True)
        out = target_forward(self.target, torch.tensor([seq], device=self.device),
                             torch.arange(len(seq), device=self.device)[None], cache, with_states=True)
        feats, hidden = [self.drafter.context_features(out.hidden_states)], [out.hidden]
        while len(seq) - n < length and (len(seq) == n or seq[-1] not in self.eos_ids):
            seq.append(LazyArgmax(hidden[-1][-1:], self.lm_head)[0])
            out = target_forward(self.target, torch.tensor([seq[-1:]], device=self.device),
                                 torch.tensor([[len(seq) - 1]], device=self.device), cache, with_states=True)
            feats.append(self.drafter.context_features(out.hidden_states))
            hidden.append(out.hidden)
        return Continuation(seq[n:], torch.cat(feats, dim=1), n, torch.cat(hidden, dim=0), tuple(prompt_ids), cache)

    @torch.inference_mode()
    def decode_along(self, prompt_ids: list[int], ar_tokens: list[int], max_new_tokens: int = 256,
                     record_trees: bool = False, stop_at_eos: bool = True,
                     continuation: Continuation | None = None) -> DecodeResult:
        """The decode's rounds, walked along greedy AR's tokens `ar_tokens` (module doc). `continuation`: one this
        loop's `continuation` made for the same prompt, tokens and length before (several methods walking one
        prompt share it); `last_continuation` is the one the decode used."""
        require(self.builder is not None, "a walked decode needs a speculative method (not ar)")
        self.check_prompt(prompt_ids, max_new_tokens)
        n = len(prompt_ids)
        length = max_new_tokens + self.drafter.block_size
        if continuation is None:
            continuation = self.continuation(prompt_ids, ar_tokens, length)
        k, cont = min(len(ar_tokens), length), continuation.tokens
        require(continuation.prompt == tuple(prompt_ids) and cont[:k] == list(ar_tokens[:k])
                and (len(cont) >= length or (cont and cont[-1] in self.eos_ids)),
                "a walked decode was handed a continuation of another prompt or a shorter length")
        self._cont = continuation
        follow = getattr(self.drafter, "follow", None)  # a drafter built on the known continuation
        if follow is not None:
            follow(self._cont, self.lm_head, self.target)
        result = DecodeResult([self._cont.tokens[0]], n, 0.0, 0.0)
        timer = StageTimer(self.device)
        st = SpecState(None, self.drafter.new_cache(), self._cont.features[:, :n], n, self._cont.tokens[0])
        eos = stop_at_eos and st.root in self.eos_ids
        self._speculate(result, st, max_new_tokens, record_trees, stop_at_eos, timer, eos)
        return result

    @property
    def last_continuation(self) -> Continuation | None:
        return getattr(self, "_cont", None)

    def _walk_rows(self, st: SpecState, a: int) -> torch.Tensor:
        """The features a commit of `a` accepted rows hands on: positions start .. start + a - 1."""
        return self._cont.features[:, st.start:st.start + a]

    def tree_round(self, st: SpecState, cand: Candidates, budget: int, timer: StageTimer,
                   record_trees: bool = False) -> RoundOutcome:
        if budget == 0:
            return self.ar_round(st, timer)
        tree = self.builder.build(st.root, cand, budget)
        nxt = _PathTokens(self._cont, st.start, tree)
        accepted, bonus = greedy_walk(child_edges(tree.tokens, tree.parents), nxt)
        record = self.tree_record(tree, accepted, bonus, budget, st.start, timer.take(), record_trees)
        new = [tree.tokens[i] for i in accepted[1:]] + [bonus]
        return RoundOutcome(record, new, self._walk_rows(st, len(accepted)))

    def ar_round(self, st: SpecState, timer: StageTimer) -> RoundOutcome:
        record = RoundRecord(accepted=1, budget=0, nodes=0, prefix_len=st.start, **timer.take())
        return RoundOutcome(record, [self._cont.at(st.start + 1)], self._walk_rows(st, 1))


def follow_greedy(target, drafter, prompt_ids: list[int], length: int, eos_ids=None) -> Continuation:
    """Hand `drafter` (one with a `follow` method, `graftlib.models.strength`) greedy AR's first `length` tokens
    after `prompt_ids` (fewer at an EOS) with the target's states along them, so that it drafts along them in
    the next decode of that prompt, walked or verified; return that continuation."""
    loop = WalkedLoop(target, drafter, eos_ids=eos_ids)
    cont = loop.continuation(list(prompt_ids), [], length)
    drafter.follow(cont, loop.lm_head, target)
    return cont


class _PathTokens:
    """The target's token at a tree node as the walk reads it: at a node of depth d on the path that
    matched the continuation so far, the continuation's token at position start + d + 1 (the walk
    reads no other node)."""

    def __init__(self, cont: Continuation, start: int, tree):
        self.cont, self.start, self.depths = cont, start, tree.depths

    def __getitem__(self, node: int) -> int:
        return self.cont.at(self.start + self.depths[node] + 1)
