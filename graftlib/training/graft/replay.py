"""Same-prefix budget replay (paper, "SABA Oracle-Tracking Analysis") and SABA's fitting data.

A reference trajectory is decoded with some method (ddtree@B, ddtree+saba, caddtree). At every round t, after
the draft step, the round is replayed once per budget B of a grid with the prefix, the target KV cache and the
drafter outputs fixed (build tree, verify, accept, commit, then the target cache cropped back exactly), then
the reference round runs and the trajectory continues: the emitted tokens are the reference decode's.

Per (round, B) a `ReplayRecord` holds a_t(B) (accepted, bonus included), the stage times and SABA's state s_t;
the reference record of a round also its `features` (`methods.budget_predictor.round_features`: what the round
knows before it verifies).
The latency l_t(B) is the whole round (the draft is paid once whatever B is); budget 0 is one plain AR step,
so the oracle may choose not to speculate. Oracle: B*_t = argmax_B a_t(B) / l_t(B); a reference choice B_t
retains TPS_t(B_t) / TPS_t(B*_t). At T > 0 every budget of a round replays with the round's random stream.

Walk replay (`WalkReplay`, `priced`), for grids too large to verify on a CPU (the paper's 32..512): at T = 0
the target's argmax along any path that matched the reference so far is the continuation's next token, so
a_t(B) is the tree's walk along the continuation; and the best-first heap pops in a fixed order, so the
B-node tree is the first B pops of the largest tree: one build per round gives every budget. Its records
carry no times; `priced` gives them a cost profile's stage times.

Invariants: a walked a_t(B) equals the verified replay's for every B (tests/test_walk_replay.py); rounds whose
continuation is cut by the length limit are dropped, never counted short.

`graft replay` runs it on eval or validation prompts and appends one JSON line per prompt; with
`--cost-profile` it walks the grid and prices every record by the profile. Details: docs/internals.md.
"""

import statistics
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from graftlib.core.ar_path import follow_greedy
from graftlib.core.builders import HeapTreeBuilder
from graftlib.core.decode import DecodeResult
from graftlib.core.errors import require
from graftlib.core.paths import results_dir
from graftlib.core.records import append_record, read_records, setting_id
from graftlib.core.sampling import GREEDY, Sampling, prompt_sampling
from graftlib.core.timing import StageTimer
from graftlib.core.tree import EDGE_SHIFT, child_edges
from graftlib.core.verify import commit_cache
from graftlib.inputs.cli_args import (
    add_method_args,
    add_model_args,
    add_sampling_args,
    method_inputs,
    sampling_from_args,
)
from graftlib.inputs.cost_profile import CostProfile, RoundShape
from graftlib.methods.budget_predictor import round_features
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import (
    AR_METHODS,
    CHAIN_METHODS,
    SELECTOR_METHODS,
    SHIPPED_INPUTS,
    MethodInputs,
    make_parts,
)
from graftlib.methods.saba import StateTracker
from graftlib.methods.saba_params import default_params
from graftlib.methods.selector import Selector


@dataclass
class ReplayRecord:
    round: int
    budget: int
    nodes: int
    accepted: int  # a_t(B), bonus included
    prefix_len: int
    t_draft: float
    t_tree: float
    t_verify: float
    t_commit: float
    tokens: list[int]  # what the round would emit with this budget
    state: list[float]  # s_t = [conf, degen, hist, 1]
    reference_budget: int
    reference: bool = False
    features: dict | None = None  # the reference record's `round_features` (None on the grid's records)

    @property
    def latency(self) -> float:
        return self.t_draft + self.t_tree + self.t_verify + self.t_commit

    def to_dict(self) -> dict:
        """The record as a JSON line stores it (no `features` key where it has none)."""
        out = asdict(self)
        if out["features"] is None:
            del out["features"]
        return out

    @property
    def tps(self) -> float:
        return self.accepted / self.latency


@dataclass
class ReplayResult:
    decode: DecodeResult  # the reference trajectory
    records: list[ReplayRecord]


@dataclass(frozen=True)
class ReplaySpec:
    """How a same-prefix replay replays each round: over the budgets of `grid` (0 = one plain AR step), each
    timed `repeats` times (the median kept), or walked along the reference's continuation (`walk`, T = 0, untimed;
    `WalkReplay`) and priced by `profile` where one is given (`priced`); `max_new_tokens` per prompt, prompts
    formatted to at most `max_prompt_tokens`; at T > 0 `sampling`, each prompt with its own seed
    (`prompt_sampling`); SABA's state s_t tracked over `window` rounds from `hist_prior` (`replay_decoder` takes
    the method's calibration's)."""

    grid: tuple[int, ...]
    max_new_tokens: int = 128
    repeats: int = 1
    sampling: Sampling = GREEDY
    walk: bool = False
    profile: CostProfile | None = None
    max_prompt_tokens: int | None = 512
    window: int = 8
    hist_prior: float = 2.0

    def __post_init__(self):
        require(len(self.grid) > 0 and all(isinstance(b, int) and b >= 0 for b in self.grid),
                f"replay grid must be integers >= 0 (0 = an AR step), got {list(self.grid)}")
        require(self.repeats >= 1, f"repeats must be >= 1, got {self.repeats}")
        require(self.profile is None or self.walk, "a replay priced by a cost profile walks its grid (walk=True)")
        require(not self.walk or self.sampling.greedy, "a walk replay reads acceptance off the greedy continuation: "
                "T = 0 only")
        object.__setattr__(self, "grid", tuple(sorted(set(self.grid))))


class ReplayDecoder(Decoder):
    """A `Decoder` whose speculative loop replays every round over `spec.grid` before running it."""

    def __init__(self, target, drafter, builder, controller, spec: ReplaySpec, eos_ids: list[int] | None = None):
        super().__init__(target, drafter, builder, controller, eos_ids, spec.sampling)
        require(builder is not None, "replay needs a speculative method (not ar)")
        self.spec = spec
        self.grid = list(spec.grid)
        self.repeats = spec.repeats
        self.records: list[ReplayRecord] = []
        self.tracker = StateTracker(spec.window, spec.hist_prior)

    def replay(self, prompt_ids: list[int], max_new_tokens: int = 256, stop_at_eos: bool = True,
               sampling: Sampling | None = None, record_trees: bool = False) -> ReplayResult:
        """Replay one prompt; `sampling`: this prompt's (kept for later replays), else the decoder's;
        `record_trees`: the reference rounds keep their trees (`Decoder.decode`)."""
        if sampling is not None:
            self.sampling = sampling.check()
        self.records = []
        self.tracker = StateTracker(self.spec.window, self.spec.hist_prior)
        res = self.decode(prompt_ids, max_new_tokens, record_trees=record_trees, stop_at_eos=stop_at_eos)
        return ReplayResult(res, self.records)

    def _measure(self, st, cand, budget: int, timer: StageTimer, base: dict) -> ReplayRecord:
        runs = []
        rng = st.gen.get_state() if st.gen is not None else None
        for _ in range(self.repeats):
            if rng is not None:  # T > 0: every budget and repeat sees the round's same random stream
                st.gen.set_state(rng)
            timer.restart()
            step = self.tree_round(st, cand, budget, timer)
            commit_cache(st.cache, st.start, [])  # restore the round's start state
            runs.append(step)
        if rng is not None:
            st.gen.set_state(rng)
        r = runs[0].record
        times = {k: statistics.median(getattr(s.record, k) for s in runs) for k in ("t_tree", "t_verify", "t_commit")}
        if budget == 0:
            base = {**base, "t_draft": 0.0}  # an AR step does not draft
        return ReplayRecord(budget=budget, nodes=r.nodes, accepted=r.accepted, tokens=runs[0].new, **times, **base)

    def largest(self, st, cand):
        """The round's tree at the grid's largest budget (built again: outside every measured stage), by the heap a
        stop rule or a predictor cuts (`heap`) where the method has one, so its features are the heap's."""
        return getattr(self.builder, "heap", self.builder).build(st.root, cand, self.grid[-1])

    def _speculate(self, result, st, max_new_tokens, record_trees, stop_at_eos, timer, eos):
        self.controller.reset()
        k = max(self.grid[-1], self.controller.max_budget)
        t = 0
        while not eos and len(result.tokens) < max_new_tokens:
            go = self.controller.speculate(st.start)
            timer.restart()
            cand = self.draft(st, k)
            timer.mark("candidates")
            t_draft = timer.take()["t_draft"]
            budget = self.controller.budget(cand, st.start) if go else 0
            t_choose = timer.lap()
            base = dict(round=t, prefix_len=st.start, t_draft=t_draft, state=self.tracker.signals(cand).tolist(),
                        reference_budget=budget)
            for b in self.grid:
                self.records.append(self._measure(st, cand, b, timer, base))
            timer.restart()
            step = self.tree_round(st, cand, budget, timer, record_trees)
            step.record.t_draft = t_draft if go else 0.0  # a post-gated round (go, budget 0) paid its draft
            step.record.t_tree += t_choose
            r = step.record
            features = round_features(cand, self.largest(st, cand), self.grid)
            self.records.append(ReplayRecord(budget=budget, nodes=r.nodes, accepted=r.accepted, tokens=step.new,
                                             t_tree=r.t_tree, t_verify=r.t_verify, t_commit=r.t_commit,
                                             reference=True, features=features, **{**base, "t_draft": r.t_draft}))
            if budget:
                self.tracker.feedback(asdict(r))
            eos = self.advance(result, st, step, max_new_tokens, stop_at_eos)
            timer.restart()
            t += 1
        result.stop = "eos" if eos else "length"


class WalkReplay(ReplayDecoder):
    """A `ReplayDecoder` whose grid budgets are walked along the reference's continuation (module doc)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        require(self.spec.walk, "a walk replay's spec walks its grid (ReplaySpec(walk=True))")
        require(isinstance(self.builder, HeapTreeBuilder), "a walk replay needs a best-first heap (ddtree, "
                                                           "ddtree+tdes, "
                f"ddtree+saba, graft), whose trees are nested in the budget, not {type(self.builder).__name__}")
        self._rounds: list[tuple[int, list[int], list[int], list[int]]] = []  # (pos, tokens, parents, record idx)
        self._result = None
        self._tree = None  # the round's largest tree, built once (`_measure`)

    def replay(self, prompt_ids: list[int], max_new_tokens: int = 256, stop_at_eos: bool = True,
               sampling=None, record_trees: bool = False) -> ReplayResult:
        require(sampling is None or sampling.greedy, "a walk replay runs at T = 0 only")
        self._rounds = []
        depth = self.drafter.block_size - 1
        res = super().replay(prompt_ids, max_new_tokens + depth + 1, stop_at_eos, GREEDY, record_trees)
        out = res.decode.tokens
        ended = res.decode.stop == "eos"
        keep = set()
        for pos, tokens, parents, idx in self._rounds:
            if pos >= max_new_tokens or (pos + depth + 1 > len(out) and not ended):
                continue
            keep.add(self.records[idx[0]].round)
            walked = walk_ranks(tokens, parents, out[pos:])
            for i in idx:
                r = self.records[i]
                a = min(1 + sum(1 for m in walked if m <= r.budget), len(out) - pos) if r.budget > 0 else 1
                self.records[i] = replace(r, accepted=a, nodes=min(r.budget, len(tokens) - 1),
                                          tokens=out[pos:pos + a])
        self.records = [r for r in self.records if r.round in keep]
        return ReplayResult(res.decode, self.records)

    def largest(self, st, cand):
        return self._tree  # built by this round's first `_measure`

    def _speculate(self, result, st, max_new_tokens, record_trees, stop_at_eos, timer, eos):
        self._result = result
        super()._speculate(result, st, max_new_tokens, record_trees, stop_at_eos, timer, eos)

    def _measure(self, st, cand, budget: int, timer, base: dict) -> ReplayRecord:
        """An untimed placeholder; the round's largest tree is built once, at its first budget."""
        pos = len(self._result.tokens)
        if not self._rounds or self._rounds[-1][0] != pos:
            self._tree = self.builder.build(st.root, cand, self.grid[-1])
            self._rounds.append((pos, self._tree.tokens, self._tree.parents, []))
        self._rounds[-1][3].append(len(self.records))
        return ReplayRecord(budget=budget, nodes=0, accepted=0, tokens=[], t_tree=0.0, t_verify=0.0, t_commit=0.0,
                            **{**base, "t_draft": 0.0})


def walk_ranks(tokens: list[int], parents: list[int], continuation: list[int]) -> list[int]:
    """The running maximum of the pop indices along the tree's path that follows `continuation`:
    entry k is the largest node index among the path's first k + 1 draft nodes, so the tree of
    budget B (its first B pops) accepts 1 + #{k: entry k <= B} tokens (module doc)."""
    edges = child_edges(tokens, parents)
    node, top, ranks = 0, 0, []
    for tok in continuation:
        node = edges.get(node << EDGE_SHIFT | tok)
        if node is None:
            break
        top = max(top, node)
        ranks.append(top)
    return ranks


def priced(records: list[ReplayRecord], profile: CostProfile) -> list[ReplayRecord]:
    """Replay records with the stage times of `profile`'s modeled rounds: a drafted round (budget > 0)
    t_draft = c_draft and t_verify the rest of C(B, P) (its rows term read from its accepted tokens);
    budget 0 the AR step C_AR(P), plus c_draft in t_draft when the round had drafted (a reference round
    its post-draft gate declined); t_tree = t_commit = 0, so `latency` is the profile's round cost."""
    out = []
    for r in records:
        drafted = r.budget > 0 or r.t_draft > 0
        total = profile.round_s(RoundShape(r.budget, r.nodes, r.prefix_len, drafted,
                                           rows=r.accepted if r.budget > 0 else 0))
        t_draft = profile.c_draft if drafted else 0.0
        out.append(replace(r, t_draft=t_draft, t_tree=0.0, t_verify=total - t_draft, t_commit=0.0))
    return out


def replay_decoder(target, drafter, method: str, budget: int, spec: ReplaySpec, inputs: MethodInputs = SHIPPED_INPUTS,
                   eos_ids: list[int] | None = None, cls: type[ReplayDecoder] | None = None) -> ReplayDecoder:
    """A replay decoder for `method` (fixed budget, or an adaptive method capped at `budget`) with the methods'
    `inputs` (the SABA calibration defaulting to the shipped one, whose window and prior track s_t): a
    `WalkReplay` where `spec` walks, else a `ReplayDecoder` (`cls`: a subclass of it instead)."""
    require(method not in AR_METHODS, f"replay runs methods drafted by one DFlash forward, not {method!r} (its tree "
            "grows with the drafter, so the candidates cannot be held fixed across budgets)")
    params = inputs.saba or default_params()
    require(method not in ("ar", *CHAIN_METHODS), f"replay needs a tree method, got {method!r}")
    selector = Selector.of(drafter, method) if method in SELECTOR_METHODS else None
    builder, controller = make_parts(method, budget, drafter.block_size, inputs=replace(inputs, saba=params),
                                     embed=target.get_input_embeddings().weight.detach(), selector=selector)
    cls = cls or (WalkReplay if spec.walk else ReplayDecoder)
    return cls(target, drafter, builder, controller, replace(spec, window=params.window, hist_prior=params.hist_prior),
               eos_ids)


def within_grid(params, grid: list[int]):
    """SABA params that choose within a replay grid (oracle tracking): the grid's positive budgets,
    and the AR gate only when the grid has budget 0 (the AR step) to compare it with."""
    require(any(b > 0 for b in grid), f"replay grid {grid} has no positive budget")
    return replace(params, grid=sorted(b for b in set(grid) if b > 0), c_ar=params.c_ar if 0 in grid else None)


def oracle_rows(records: list[ReplayRecord]) -> list[dict]:
    """Per round: the grid's TPS_t(B), B*_t, the reference B_t and its retained oracle throughput, and
    `fixed`: each grid budget's retained throughput (a fixed budget's, over the same oracle)."""
    rounds: dict[int, list[ReplayRecord]] = {}
    for r in records:
        rounds.setdefault(r.round, []).append(r)
    rows = []
    for t, recs in sorted(rounds.items()):
        grid = [r for r in recs if not r.reference]
        ref = next(r for r in recs if r.reference)
        paid_draft = ref.budget == 0 and ref.t_draft > 0  # an AR step after a draft: the grid's has no draft
        chosen = ref if paid_draft else next((r for r in grid if r.budget == ref.budget), ref)
        best = max(grid + [chosen], key=lambda r: r.tps)
        rows.append(dict(round=t, prefix_len=ref.prefix_len, budget=ref.budget, best_budget=best.budget,
                         tps=chosen.tps, best_tps=best.tps, retained=chosen.tps / best.tps,
                         accepted={r.budget: r.accepted for r in grid},
                         fixed={r.budget: r.tps / best.tps for r in grid}))
    return rows


def fixed_budget_retained(records: list[ReplayRecord]) -> dict[int, float]:
    """Mean retained oracle throughput of always choosing budget B (each grid budget), the
    state-blind reference a per-round controller has to beat; max over B = the best fixed budget
    chosen after the fact."""
    rounds: dict[int, dict[int, ReplayRecord]] = {}
    for r in records:
        if not r.reference:
            rounds.setdefault(r.round, {})[r.budget] = r
    budgets = sorted(set.intersection(*(set(g) for g in rounds.values()))) if rounds else []
    return {b: float(np.mean([g[b].tps / max(x.tps for x in g.values()) for g in rounds.values()]))
            for b in budgets}


def tracking_summary(rows: list[dict]) -> dict:
    """Mean retained oracle throughput and the share of rounds at >= 95% of the oracle."""
    ret = np.array([r["retained"] for r in rows])
    return {"rounds": len(rows), "mean_retained": float(ret.mean()) if len(ret) else float("nan"),
            "frac_ge_95": float((ret >= 0.95).mean()) if len(ret) else float("nan")}


# ----------------------------------------------------------------------------- CLI


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="same-prefix budget replay: per-round a_t(B), l_t(B), oracle tracking")
    add_model_args(p)
    add_method_args(p)
    p.add_argument("--method", default="ddtree+saba",
                   help="reference tree method: ddtree, ddtree+tdes (fixed budget), ddtree+saba, graft, caddtree")
    p.add_argument("--budget", type=int, default=64, help="ddtree: its budget; ddtree+saba / caddtree: the cap")
    p.add_argument("--grid", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64],
                   help="budgets replayed every round (0 = a plain AR step); SABA (ddtree+saba, graft) chooses "
                   "within them, its AR gate only when 0 is among them")
    p.add_argument("--task", default="gsm8k")
    p.add_argument("--split", default="eval", help="eval (oracle tracking) or val (SABA fitting data)")
    p.add_argument("--prompts", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--max-prompt-tokens", type=int, default=512)
    p.add_argument("--repeats", type=int, default=1, help="timing repeats per (round, budget); medians kept")
    p.add_argument("--out", default=None, help="JSONL file (default results/replay.jsonl)")
    add_sampling_args(p)
    p.set_defaults(func=run)


def replay_prompts(pair, method: str, budget: int, items: list, out, spec: ReplaySpec,
                   inputs: MethodInputs = SHIPPED_INPUTS, log=None) -> list[dict]:
    """Replay `items` (data.Item) as `spec` says and append one JSON line per prompt to `out`; prompts already
    in `out` for the same setting (pair, calibration, method, budget, grid, TDES, sampling at T > 0, ...)
    are skipped, so an interrupted sweep resumes. Returns this setting's lines for `items`. At T > 0
    each prompt replays with its own seed (`prompt_sampling`, as in `graft bench`). A walked spec is priced:
    its grid walked (`WalkReplay`, T = 0) and every record priced by its profile (`priced`), which the
    setting names."""
    from graftlib.data.prompts import format_prompt

    params = inputs.saba or default_params()
    require(spec.walk == (spec.profile is not None), "a replay of prompts walks exactly when a cost profile prices "
            "it: give the walked spec its profile")
    dec = replay_decoder(pair.target, pair.drafter, method, budget, spec, replace(inputs, saba=params), pair.eos_ids)
    follow = getattr(pair.drafter, "follow", None)  # the drafter-strength construction: drafts along AR's tokens
    require(follow is None or spec.walk, "a drafter-strength construction replays walked only (pass a cost "
            "profile): its figures are modeled, never timed")
    max_new_tokens, profile, sampling = spec.max_new_tokens, spec.profile, spec.sampling
    setting = dict(pair.describe(), calibration=params.describe(), method=method, budget=budget, grid=dec.grid,
                   max_new_tokens=max_new_tokens, max_prompt_tokens=spec.max_prompt_tokens, repeats=spec.repeats,
                   **replace(inputs, saba=params).setting([method]),
                   **sampling.setting(), **({"cost_profile": profile.label} if profile is not None else {}),
                   **(pair.drafter.strength.setting() if follow is not None else {}))
    sid = setting_id(**setting)
    done = {r["uid"]: r for r in read_records(out) if r.get("setting_id") == sid}
    for item in items:
        if item.uid in done:
            continue
        prompt = format_prompt(item, pair.tokenizer, spec.max_prompt_tokens)
        if follow is not None:  # greedy AR's continuation, as far as the reference decode and its last block reach
            follow_greedy(pair.target, pair.drafter, prompt.input_ids, max_new_tokens + 3 * pair.drafter.block_size,
                          pair.eos_ids)
        res = dec.replay(prompt.input_ids, max_new_tokens, sampling=prompt_sampling(sampling, item.uid))
        if profile is not None:
            res = ReplayResult(res.decode, priced(res.records, profile))
        rows = oracle_rows(res.records)
        rec = {"setting_id": sid, "setting": setting, "method": method, "budget": budget, "grid": dec.grid,
               "task": item.task, "uid": item.uid, "tokens": res.decode.tokens, "mat": res.decode.mat,
               "records": [r.to_dict() for r in res.records], "summary": tracking_summary(rows), "time": time.time()}
        append_record(out, rec)
        done[item.uid] = rec
        if log:
            s = rec["summary"]
            log(f"{item.uid}: rounds={s['rounds']} MAT={res.decode.mat:.2f} retained={s['mean_retained']:.3f} "
                f">=95%: {s['frac_ge_95']:.2f}")
    return [done[i.uid] for i in items]


def records_of(lines: list[dict]) -> list[ReplayRecord]:
    """The ReplayRecords of `replay_prompts` lines, rounds renumbered to be unique across prompts."""
    out, offset = [], 0
    for line in lines:
        recs = [ReplayRecord(**r) for r in line["records"]]
        for r in recs:
            r.round += offset
        offset += 1 + max((r["round"] for r in line["records"]), default=-1)
        out += recs
    return out


def round_prompts(lines: list[dict]) -> dict[int, int]:
    """The prompt (its index in `lines`) of each round number that `records_of(lines)` gives."""
    out, offset = {}, 0
    for i, line in enumerate(lines):
        n = 1 + max((r["round"] for r in line["records"]), default=-1)
        out.update({offset + k: i for k in range(n)})
        offset += n
    return out


def run(args) -> int:
    from graftlib.data.prompts import load_items
    from graftlib.models.pair import load_pair

    sampling = sampling_from_args(args)
    inputs = method_inputs(args)
    params = within_grid(inputs.saba or default_params(), args.grid)
    profile = CostProfile.load(args.cost_profile) if args.cost_profile else None
    pair = load_pair(args.target, args.drafter, args.device, args.device_map, dtype=args.dtype)
    items = load_items(args.task, args.split, args.prompts)
    out = args.out or results_dir() / "replay.jsonl"
    spec = ReplaySpec(tuple(args.grid), args.max_new_tokens, args.repeats, sampling, walk=profile is not None,
                      profile=profile, max_prompt_tokens=args.max_prompt_tokens)
    lines = replay_prompts(pair, args.method, args.budget, items, out, spec, replace(inputs, saba=params), log=print)
    s = tracking_summary(oracle_rows(records_of(lines)))
    print(f"all: rounds={s['rounds']} mean retained oracle throughput={s['mean_retained']:.3f} "
          f"rounds >= 95% of oracle: {s['frac_ge_95']:.2f}  (calibration {params.id})")
    return 0
