"""Stage timing of the decode loop: wall-clock laps that mean the same on CPU and CUDA.

On CUDA kernels run asynchronously, so a lap that did not wait for them would charge a stage's
work to whichever later stage synchronizes first; `StageTimer` synchronizes the device at every
boundary. The decode loop, replay and the cost measurements share it, so their stage times are
comparable.

Marks (`StageTimer.mark(name)`): the decode loop's one timing call, at the end of each named sub-step (gate,
draft forward, candidates, budget, tree build, verify inputs, verify forward, walk, commit, update; `STAGES`). A mark
that ends one of a round's stages (draft, tree, verify, commit) reads the clock (synchronizing a GPU) and charges
the time since the previous read to that stage; `take()` hands the round's stage seconds to its record and starts
the next round's. Where the lab attaches a `SplitLog` (host-overhead measurements) every mark also charges the time
since the previous mark to its own name, and any events counted on the log in between (host<->device
synchronizations, `graftlib.lab.run.costs.host_overhead`); without a log the marks inside a stage return at once and
never synchronize, so the loop pays nothing for them. The log's clock is wall time unless given another
(`time.thread_time`: a CPU run's host work without the preemptions of a shared machine).
Invariants: with a log, the split times of a decode sum to its wall time from its first mark on; a round's stage
seconds are the same with a log as without (the stage ends are read either way).

Warm-up (`warm_up`, `WarmUp`): what is timed must be warm. A GPU's first decodes of a shape compile
kernels and fill caches (seconds, where a warm decode takes milliseconds), so a fixed number of
warm-up decodes does not suffice; `warm_up` repeats a short decode until two in a row agree.
"""

import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class SplitLog:
    """The splits of a run in order, as (name, seconds), and the events (by kind) counted between splits.

    Bookkeeping per split is an append and, when events were counted since the previous split, one
    more (`counted`); `events` sums them by split name when read, so the work a split charges to the
    next one (after its clock read) stays a few list operations."""

    splits: list[tuple[str, float]] = field(default_factory=list)
    clock: Callable[[], float] = time.perf_counter  # wall; a thread CPU clock leaves a shared CPU's preemptions out
    counted: list[tuple[str, dict[str, int]]] = field(default_factory=list)  # (split name, its events by kind)
    pending: dict[str, int] = field(default_factory=dict)  # events counted since the last split
    last: float | None = None  # time of the last split (None: the clock has not started)

    def count(self, kind: str) -> None:
        self.pending[kind] = self.pending.get(kind, 0) + 1

    def charge(self, name: str, t: float) -> None:
        if self.last is not None:
            self.splits.append((name, t - self.last))
        if self.pending:
            self.counted.append((name, self.pending))
            self.pending = {}
        self.last = t

    @property
    def events(self) -> dict[str, Counter]:
        """Counted events by split name and kind, summed over the run."""
        out: dict[str, Counter] = defaultdict(Counter)
        for name, counts in self.counted:
            out[name].update(counts)
        return out


# The decode loop's sub-steps in round order: the stage each one's time goes to (None: untimed, the prefill and the
# update between rounds) and whether it ends that stage (the mark that reads the clock without a log).
STAGES: dict[str, tuple[str | None, bool]] = {
    "prefill": (None, True), "gate": ("draft", False), "draft_forward": ("draft", False),
    "candidates": ("draft", True), "budget": ("tree", False), "tree_build": ("tree", False),
    "verify_inputs": ("tree", True), "verify_forward": ("verify", False), "walk": ("verify", True),
    "commit": ("commit", True), "update": (None, True),
}
ROUND_STAGES = ("draft", "tree", "verify", "commit")  # a `RoundRecord`'s t_draft .. t_commit


class StageTimer:
    """Wall-clock stage times (module doc); synchronizes the GPU at each stage end on CUDA. `lap` is the bare
    primitive (seconds since the previous read) for measurements outside the loop."""

    def __init__(self, device: torch.device, splits: SplitLog | None = None):
        self.cuda = torch.device(device).type == "cuda"
        self.splits = splits
        self.t = self.now()
        self.stage_s = dict.fromkeys(ROUND_STAGES, 0.0)

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def lap(self) -> float:
        if self.splits is not None:
            self.splits.count("timer")  # a device sync on CUDA (`now`): counted on any device
        t, self.t = self.t, self.now()
        return self.t - t

    def mark(self, name: str) -> None:
        """The end of sub-step `name` (`STAGES`; module doc)."""
        stage, ends = STAGES[name]
        if ends:
            dt = self.lap()
            if stage is not None:
                self.stage_s[stage] += dt
        if self.splits is not None:
            if self.cuda and not ends:
                torch.cuda.synchronize()
            self.splits.charge(name, self.splits.clock())

    def take(self) -> dict[str, float]:
        """The round's stage seconds as a record's fields (t_draft .. t_commit); the next round's start at 0."""
        out = {f"t_{k}": v for k, v in self.stage_s.items()}
        self.stage_s = dict.fromkeys(ROUND_STAGES, 0.0)
        return out

    def restart(self) -> None:
        """Drop what was measured since the last read: the next stage starts now (a replay's repeated round)."""
        self.lap()
        self.stage_s = dict.fromkeys(ROUND_STAGES, 0.0)


@dataclass(frozen=True)
class WarmUp:
    """The warm-up policy: decodes of `new_tokens` until two in a row differ by at most `tolerance` of the
    earlier one's seconds per token (at least `min_decodes`, at most `max_decodes`; past that the run is
    timed anyway and its records say `stable: false`)."""

    tolerance: float = 0.10
    min_decodes: int = 2
    max_decodes: int = 8
    new_tokens: int = 16


def warm_up(seconds_per_token: Callable[[], float], policy: WarmUp = WarmUp()) -> dict:
    """Call `seconds_per_token` (one warm-up decode, its time per token) until the policy's criterion holds:
    {"decodes": how many ran, "stable": whether the criterion was met}."""
    last = None
    for n in range(1, policy.max_decodes + 1):
        t = seconds_per_token()
        if math.isnan(t):  # an untimed decode: nothing to settle
            return {"decodes": n, "stable": False}
        if last is not None and n >= policy.min_decodes and abs(t - last) <= policy.tolerance * last:
            return {"decodes": n, "stable": True}
        last = t
    return {"decodes": policy.max_decodes, "stable": False}
