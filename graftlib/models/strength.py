"""A drafter of calibrated strength: a block-parallel drafter's marginals moved toward the target's own.

The paper's claims depend on how much its drafter accepts, which a drafter trained on a 2-core CPU does not
reach; this construction stands in for a stronger drafter of the same kind. At T = 0 a decode follows greedy
AR's tokens, so the target's next-token distribution p_j at every position j is known from the causal pass
a walked decode makes anyway. A drafter of strength s drafts at depth d of a block rooted at `start`

    q_s,d  proportional to  ((1 - s) q_d + s p_{start + d - 1}) ^ (1 / tau)

over the draft vocabulary, q_d being the real drafter's marginal (s = 0, tau = 1: the real drafter). A mixture
is the law of a drafter that knows the target's distribution with probability s; its top-1 turns right
first where the target is confident, and the real drafter's pool keeps its place. tau makes it as confident
as it is right (a trained drafter is) and moves no top-1; s is fitted to the paper's chain, tau to the
top-1 accuracy (`graftlib.lab.run.strength`).

Kept from a real DFlash drafter: one marginal per depth for the whole block, conditioned on the greedy path,
so a wrong sibling's children come from the greedy path's next marginal (the mismatch TDES scores). Cannot
represent: a real drafter's spine after the path leaves it (the construction continues a sibling better;
`continuation_rates` measures both), its own hidden states for SABA and TDES (the real drafter's are used),
or any decode off a known greedy continuation: walked decodes only, modeled figures, never wall clock.
Exactness is untouched: a verified decode with it equals AR.

Details: docs/internals.md, `graftlib.models.strength`.
"""

import hashlib
import json
from pathlib import Path

import torch

from graftlib.core.ar_path import follow_greedy
from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR, portable

SCHEMA = "graft-drafter-strength/1"
STRENGTH_PATH = ASSETS_DIR / "strength" / "paper-qwen3-8b.json"  # the shipped calibration for the embedded pair
MIN_PROB = 1e-30  # log of an exact zero of the mixture (a token neither side can propose)
TRACE_TOP = 256  # the mixture's top probabilities a trace keeps per depth (the temperature fit's sum)


class StrengthDrafter:
    """The drafter `base` at strength `s` (module doc); the `Drafter` protocol by delegation, with
    `draft_logits` mixed. `follow(continuation, lm_head)` hands it the decode's greedy continuation."""

    def __init__(self, base, s: float, tau: float = 1.0):
        self.base = base
        self.set_strength(s, tau)
        self.trace: list | None = None
        self._start: int | None = None
        self._continuation = None  # the decode's greedy continuation (its `hidden`: the target's states [N, H])
        self._head: torch.Tensor | None = None  # the target's LM head rows of the draft vocabulary [V_draft, H]

    def set_strength(self, s: float, tau: float = 1.0) -> None:
        """Draft at strength `s` and temperature `tau` from now on (a run over several tasks, one per task)."""
        require(0.0 <= s <= 1.0, f"drafter strength s={s!r}: must lie in [0, 1]")
        require(tau > 0.0, f"drafter temperature tau={tau!r}: must be > 0")
        self.s, self.tau = float(s), float(tau)

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


class TaskStrengths:
    """The calibrated (s, tau) per task of a drafter-strength file (`graft calibrate-strength`), and its id."""

    def __init__(self, path: str | Path = STRENGTH_PATH):
        self.path = Path(path)
        require(self.path.is_file(), f"no drafter-strength file at {portable(self.path)}: run `graft calibrate-strength`")
        d = json.loads(self.path.read_text())
        require(d.get("schema") == SCHEMA, f"{portable(self.path)} is not a drafter-strength file ({SCHEMA})")
        self.table = {t: (float(r["s"]), float(r["tau"])) for t, r in d["tasks"].items()}
        self.pair = d.get("pair")
        self.id = hashlib.sha256(json.dumps(sorted(self.table.items())).encode()).hexdigest()[:12]

    def of(self, task: str) -> tuple[float, float]:
        """(s, tau) of `task`, or a one-line error naming the tasks the file calibrated."""
        require(task in self.table, f"{portable(self.path)} has no calibrated drafter strength for {task!r} "
                f"(calibrated: {', '.join(self.table)}): run `graft calibrate-strength --tasks {task}`")
        return self.table[task]

    def describe(self) -> dict:
        """What a result drafted with these strengths depends on: the file and its numbers' id."""
        return {"strength_file": portable(self.path), "strength_id": self.id}


def drafting_along(target, base, strengths: TaskStrengths, tasks: list[str], length: int, eos_ids=None):
    """(drafter, before) for a run over many prompts of several tasks (traces, a calibration): the drafter `base`
    as a `StrengthDrafter`, and a hook `before(i, prompt_ids)` after which it drafts prompt i at the strength of
    `tasks[i]` along greedy AR's first `length` tokens (`core.ar_path.follow_greedy`). A task without a
    calibrated strength fails here, before anything decodes."""
    for task in dict.fromkeys(tasks):
        strengths.of(task)
    drafter = StrengthDrafter(base, 0.0)

    def before(i: int, prompt_ids: list[int]) -> None:
        drafter.set_strength(*strengths.of(tasks[i]))
        follow_greedy(target, drafter, prompt_ids, length, eos_ids)

    return drafter, before
