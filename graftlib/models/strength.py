"""A drafter of calibrated strength: a block-parallel drafter's marginals moved toward the target's own along
the drafter's own spine.

The paper's claims depend on how much its drafter accepts, which a drafter trained on a 2-core CPU does not
reach; this construction stands in for a stronger drafter of the same kind. At T = 0 a decode follows greedy
AR's tokens g, so the target's distribution after any prefix of them is known from the causal pass a walked
decode makes anyway. A drafter of `Strength(s, tau, lam, kappa)` drafts, at depth d of a block rooted at `start`,

    q~_d  proportional to  ((1 - w_d) q_d + w_d r_d) ^ (1 / tau),   y_d = argmax q~_d (its spine),
    r_d = p(. | g_<=start+d-1)                                    while y_<d = g (the spine is the true path)
    r_d = lam p(. | g_<=start+d-1) + (1 - lam) p(. | g_<start+m, y_m..y_d-1)   past its first miss m

over the draft vocabulary, q_d the real drafter's marginal. One marginal per depth for the whole block, as a
DFlash drafter's; past a miss it follows the drafter's own (wrong) spine, so a sibling's children are the
spine's (lam: how much it still knows of the true path; the spine from two Jacobi sweeps of target forwards
over context + spine, exact two depths past the miss). w_d is s, or, with probability kappa per round and depth (seeded
by prompt, root and depth), all or nothing (1 with probability s, else 0): kappa spreads the knowledge over depths,
which sets where the true token sits among the drafter's alternatives at its first miss. tau makes it as confident as it
is right and moves no top-1. `Strength(s, tau)` (lam = 1, kappa = 0) is the earlier construction, mixing
toward the greedy path everywhere. The fit and validation are `graftlib.lab.run.strength`'s.

Cannot represent: a real drafter's own hidden states (SABA's and TDES's inputs are the real drafter's), or
any decode off a known greedy continuation: walked decodes only, modeled figures, never wall clock.
Exactness is untouched: a verified decode with it equals AR. Details: docs/strength.md.
"""

import hashlib
import json
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from graftlib.core.ar_path import follow_greedy
from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR, portable
from graftlib.core.verify import target_forward

SCHEMA = "graft-drafter-strength/2"
SCHEMA_V1 = "graft-drafter-strength/1"  # the earlier construction: s and tau alone, mixing toward the greedy path
STRENGTH_DIR = ASSETS_DIR / "strength"
# The shipped calibrations for the embedded pair, by name (docs/strength.md): each accepts the paper's DFlash chain
# MAT per task and differs in the tree's gain over the chain. `true-path`: the earlier construction (lam = 1,
# kappa = 0: it continues a sibling as it does its spine); `own-spine`: lam and kappa fitted to a real DFlash
# drafter's sibling continuation and first-miss rank-1 share; `pinned`: lam fitted so that DDTree also accepts the
# paper's DDTree MAT, giving up the sibling rate.
CALIBRATIONS = {"own-spine": "paper-qwen3-8b.json", "true-path": "paper-qwen3-8b-true-path.json",
                "pinned": "paper-qwen3-8b-pinned.json"}
STRENGTH_PATH = STRENGTH_DIR / CALIBRATIONS["own-spine"]  # the third regime's default calibration
MIN_PROB = 1e-30  # log of an exact zero of the mixture (a token neither side can propose)
TRACE_TOP = 256  # the mixture's top probabilities a trace keeps per depth (the temperature fit's sum)
SPINE_SWEEPS = 2  # target forwards a round past the spine's first miss (`StrengthDrafter._follow_spine`)
OUT_OF_VOCAB, PAST_END = -1, -2  # a trace's rank of a true token the draft vocabulary lacks / past the continuation


@dataclass(frozen=True)
class Strength:
    """The construction's parameters (module doc): s the mixture weight, tau the temperature, lam what it knows
    of the true path past its spine's first miss, kappa the share of all-or-nothing depths."""

    s: float
    tau: float = 1.0
    lam: float = 1.0
    kappa: float = 0.0

    def __post_init__(self):
        for name in ("s", "lam", "kappa"):
            v = getattr(self, name)
            require(0.0 <= v <= 1.0, f"drafter strength {name}={v!r}: must lie in [0, 1]")
        require(self.tau > 0.0, f"drafter temperature tau={self.tau!r}: must be > 0")

    @property
    def real(self) -> bool:
        """The real drafter's marginals, untouched."""
        return self.s == 0.0 and self.tau == 1.0

    def setting(self) -> dict:
        """What a record drafted with it is keyed by."""
        return {"strength": self.s, "tau": self.tau, "lam": self.lam, "kappa": self.kappa}


class StrengthDrafter:
    """The drafter `base` at a `Strength` (module doc); the `Drafter` protocol by delegation, with `draft_logits`
    mixed. `follow(continuation, lm_head, target)` hands it the decode's greedy continuation."""

    def __init__(self, base, strength: Strength):
        self.base = base
        self.strength = strength
        self.trace: list | None = None
        self._start: int | None = None
        self._continuation = None  # the decode's greedy continuation (its `hidden`, `cache`: the target's)
        self._head: torch.Tensor | None = None  # the target's LM head rows of the draft vocabulary [V_draft, H]
        self._target = None
        self._rows: dict[int, int] | None = None  # target id -> draft-vocabulary row (traces only)

    @property
    def s(self) -> float:
        return self.strength.s

    def __getattr__(self, name):  # config, block_size, id_map, context_features, new_cache, head_weight, ...
        return getattr(self.base, name)

    def follow(self, continuation, lm_head: torch.Tensor, target=None) -> None:
        """Draft along `continuation` (`graftlib.core.ar_path.Continuation`: its `hidden` gives p at every position
        of the greedy path; `target` and its `cache` give p after the drafter's own spine, needed when lam < 1)."""
        require(continuation.hidden is not None, "the continuation carries no target hidden states")
        require(self.strength.lam == 1.0 or (target is not None and continuation.cache is not None),
                "a drafter strength with lam < 1 drafts along its own spine: hand it the target and a continuation "
                "with its cache")
        self._continuation, self._target = continuation, target
        id_map = self.base.id_map
        self._head = lm_head[id_map] if id_map is not None else lm_head

    def __call__(self, noise_embedding, target_hidden, start: int, cache=None):
        self._start = start
        return self.base(noise_embedding, target_hidden, start, cache)

    def draft_logits(self, hidden: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor:
        """log q~_d for the D rows of `hidden` (depths 1..D of the block drafted last); a depth past the
        continuation keeps the real drafter's marginal."""
        logits = self.base.draft_logits(hidden, head_weight)
        st = self.strength
        if st.real and self.trace is None:
            return logits
        q = torch.softmax(logits.float(), dim=-1)
        mixed = q.clone()
        if st.s > 0.0 or self.trace is not None:
            if self._continuation is None or self._start is None:
                raise GraftError(f"a drafter of strength {st.s:g} drafts along a known greedy continuation: decode "
                                 "it walked (graft bench --walk), or hand it one (`follow`)")
            known = int(min(q.shape[0], self._continuation.hidden.shape[0] - self._start))
            if st.s > 0.0 and known > 0:
                w = self._weights(known)[:, None]
                r = self._probs(self._continuation.hidden[self._start:self._start + known])  # p along g
                mixed[:known] = (1.0 - w) * q[:known] + w * r
                if st.lam < 1.0:
                    self._follow_spine(q[:known], w, r, mixed)
            if self.trace is not None:
                self._record(mixed)
        return torch.log(mixed.clamp_min(MIN_PROB)) / st.tau

    def _probs(self, states: torch.Tensor) -> torch.Tensor:
        """The target's distribution over the draft vocabulary from its last hidden states [n, H]."""
        return torch.softmax(states.float() @ self._head.float().T, dim=-1)

    def _weights(self, n: int) -> torch.Tensor:
        """w_d for depths 1..n of this round (module doc): s, or all or nothing at a seeded kappa share of depths."""
        st = self.strength
        w = torch.full((n,), st.s)
        if st.kappa > 0.0:
            seed = zlib.crc32(repr((self._continuation.prompt, self._start)).encode())
            u = torch.rand(2, n, generator=torch.Generator().manual_seed(seed))
            w = torch.where(u[0] < st.kappa, (u[1] < st.s).float(), w)
        return w

    def _follow_spine(self, q: torch.Tensor, w: torch.Tensor, r: torch.Tensor, mixed: torch.Tensor) -> None:
        """Past the spine's first miss m, mix toward lam p(g) + (1 - lam) p(spine): target forwards over the
        context and the spine from m on, repeated until the spine stops changing (a Jacobi iteration), at most
        `SPINE_SWEEPS` times: each sweep fixes at least one more depth, so the marginals two depths past the miss
        are exact and deeper ones are conditioned on the last sweep's spine."""
        cont, lam = self._continuation, self.strength.lam
        truth = [cont.at(self._start + d + 1) for d in range(q.shape[0])]
        spine = self._target_ids(mixed.argmax(-1))
        m = next((d for d in range(len(truth)) if spine[d] != truth[d]), None)
        if m is None or m + 1 >= len(truth) or truth[m] < 0:
            return
        for _ in range(min(SPINE_SWEEPS, len(truth) - m)):
            p = self._probs(self._after(self._start + m + 1, spine[m:len(truth) - 1]))  # depths m + 2 .. D
            rows = slice(m + 1, len(truth))
            mixed[rows] = (1.0 - w[rows]) * q[rows] + w[rows] * (lam * r[rows] + (1.0 - lam) * p)
            new = self._target_ids(mixed.argmax(-1))
            if new == spine:
                return
            spine = new

    def _target_ids(self, ids: torch.Tensor) -> list[int]:
        id_map = self.base.id_map
        return (id_map[ids] if id_map is not None else ids).tolist()

    @torch.inference_mode()
    def _after(self, pos: int, tokens: list[int]) -> torch.Tensor:
        """The target's last hidden states [k, H] at `tokens` placed at positions pos.. after the greedy path's
        first `pos` tokens (prompt included): one forward against the continuation's cache, masked to that
        prefix and the tokens' own causal order, the cache cropped back after."""
        cache = self._continuation.cache
        past, k = cache.get_seq_length(), len(tokens)
        dev = self._head.device
        dtype = next(self._target.parameters()).dtype
        mask = torch.full((1, 1, k, past + k), torch.finfo(dtype).min, dtype=dtype, device=dev)
        mask[..., :pos] = 0.0
        mask[..., past:] = torch.triu(torch.full((k, k), torch.finfo(dtype).min, dtype=dtype, device=dev), 1)
        out = target_forward(self._target, torch.tensor([tokens], device=dev),
                             torch.arange(pos, pos + k, device=dev)[None], cache, attention_mask=mask)
        for layer in cache.layers:
            layer.crop(-k)
        return out.hidden

    def _record(self, mixed: torch.Tensor) -> None:
        """Append (top probabilities [D, TRACE_TOP], top-1 right [D], the true token's rank [D]) of this block
        before the temperature: rank 0 is the top-1, `OUT_OF_VOCAB` a true token the draft vocabulary lacks,
        `PAST_END` a depth past the continuation (counted wrong)."""
        top, ids = torch.topk(mixed, min(TRACE_TOP, mixed.shape[-1]), dim=-1)
        first = self._target_ids(ids[:, 0])
        truth = [self._continuation.at(self._start + d + 1) for d in range(len(first))]
        right = [first[d] == truth[d] for d in range(len(first))]
        ranks = []
        for d, t in enumerate(truth):
            row = self._draft_index(t) if t >= 0 else PAST_END
            ranks.append(int((mixed[d] > mixed[d, row]).sum()) if row >= 0 else row)
        self.trace.append((top.cpu(), torch.tensor(right), torch.tensor(ranks)))

    def _draft_index(self, token: int) -> int:
        """The draft-vocabulary row of target id `token`, or `OUT_OF_VOCAB`."""
        id_map = self.base.id_map
        if id_map is None:
            return token
        if self._rows is None:
            self._rows = {int(t): i for i, t in enumerate(id_map.tolist())}
        return self._rows.get(token, OUT_OF_VOCAB)


def strength_file(name_or_path: str | Path) -> Path:
    """A shipped calibration's file by its name (`CALIBRATIONS`), or a drafter-strength file's path; an unknown
    name (no file of that name, no path separator, no .json) is a one-line error listing the names."""
    given = str(name_or_path)
    if given in CALIBRATIONS:
        return STRENGTH_DIR / CALIBRATIONS[given]
    require(Path(given).is_file() or "/" in given or given.endswith(".json"),
            f"unknown drafter-strength calibration {given!r}: the names are {', '.join(CALIBRATIONS)}, or give a "
            "file's path")
    return Path(given)


def calibration_name(path: str | Path) -> str | None:
    """The name of a shipped calibration's file (as a path, or as a record's portable one), or None for any other."""
    return next((n for n, f in CALIBRATIONS.items() if Path(path).parts[-2:] == ("strength", f)), None)


class TaskStrengths:
    """The calibrated `Strength` per task of a drafter-strength file (`graft calibrate-strength`), given by its
    name (`CALIBRATIONS`) or path, and its id."""

    def __init__(self, path: str | Path = STRENGTH_PATH):
        self.path = strength_file(path)
        self.name = calibration_name(self.path)
        require(self.path.is_file(), f"no drafter-strength file at {portable(self.path)}: run `graft "
                                     "calibrate-strength`")
        d = json.loads(self.path.read_text())
        require(d.get("schema") in (SCHEMA, SCHEMA_V1), f"{portable(self.path)} is not a drafter-strength file "
                f"({SCHEMA})")
        self.table = {t: Strength(float(r["s"]), float(r["tau"]), float(r.get("lam", 1.0)), float(r.get("kappa", 0.0)))
                      for t, r in d["tasks"].items()}  # a /1 file: the earlier construction (lam = 1, kappa = 0)
        self.pair = d.get("pair")
        self.id = hashlib.sha256(json.dumps(sorted((t, asdict(v)) for t, v in self.table.items())).encode()
                                 ).hexdigest()[:12]

    def of(self, task: str) -> Strength:
        """The `Strength` of `task`, or a one-line error naming the tasks the file calibrated."""
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
    drafter = StrengthDrafter(base, Strength(0.0))

    def before(i: int, prompt_ids: list[int]) -> None:
        drafter.strength = strengths.of(tasks[i])
        follow_greedy(target, drafter, prompt_ids, length, eos_ids)

    return drafter, before
