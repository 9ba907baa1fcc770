"""Cost curves on the machine at hand: verify forward vs tree size, and tree building vs budget.

On a GPU verification is nearly flat up to ~100 nodes; on a CPU it is not, and this curve
decides whether speculation pays and which budgets are worth having (SABA's cost model, eq. 17,
is fitted to measurements like these). Protocol: a prefix of `prefix_len` tokens is prefilled
once; for every repeat, every size is measured in shuffled order (drift hits all sizes alike);
each measurement is the full verify step of the decode loop (mask/positions from
`verify_inputs`, target body with hidden states, LM head on 2 walk rows, cache commit of 2 nodes)
and the cache is cropped back afterwards. Medians are reported.

`graft costs` prints both tables and writes one JSON record to results/costs.jsonl.

`graft costs --ar-draft` measures instead the AR drafter's forwards (`ar_draft_cost_curve`: the draft step
itself, per frontier width and context rows, shuffled, cropped back) and fits one line e0 + e1 rows through
the medians (`fit_ar_draft`), what prices AR-drafted rounds in a cost profile (`c_ar_draft`);
`--scale-to-profile` prices it at its measured ratio to DFlash's draft step, which load moves less.

Details: docs/internals.md, `graftlib.lab.run.costs.cost_curves`.
"""

import os
import random
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import torch

from graftlib.core.ar_drafting import ARDraftState, ARTreeDrafter, DraftPool, KeepBest
from graftlib.core.builders import Candidates, HeapTreeBuilder
from graftlib.core.decode import SpecState
from graftlib.core.errors import require
from graftlib.core.kvcache import target_cache
from graftlib.core.paths import results_dir
from graftlib.core.records import append_record, write_json_atomic
from graftlib.core.timing import StageTimer
from graftlib.core.tree import verify_inputs
from graftlib.core.verify import LazyArgmax, commit_cache, target_forward
from graftlib.inputs.cli_args import add_ar_drafter_arg, add_model_args
from graftlib.inputs.cost_profile import (
    AR_DRAFT_COMMAND,
    AR_DRAFT_SCHEMA,
    CostProfile,
    saba_profile,
    with_ar_draft,
)
from graftlib.methods.caddtree import interpolate
from graftlib.methods.eagle_tree import EagleTree


def _random_candidates(vocab: int, depth: int, k: int, seed: int) -> Candidates:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(depth, vocab, generator=g) * 4.0  # peaky, like a trained drafter's
    return Candidates.from_logits(logits, k)


@torch.inference_mode()
def verify_cost_curve(target, sizes: list[int], prefix_len: int = 256, repeats: int = 5,
                      depth: int = 15, seed: int = 0) -> dict[int, float]:
    """Median seconds of one verify step for trees of `n` tokens (root included) per size."""
    device = target.device
    vocab = target.config.vocab_size
    cache = target_cache(target.config, prefix_len + max(sizes) + 1, shared=True)  # as the decode loop's
    low = min(100, vocab // 2)  # past the special tokens of a real vocabulary
    prompt = torch.randint(low, vocab - 1, (1, prefix_len), generator=torch.Generator().manual_seed(seed))
    target_forward(target, prompt.to(device), torch.arange(prefix_len, device=device)[None], cache)
    trees = {n: HeapTreeBuilder().build(5, _random_candidates(vocab, depth, n, seed + n), n - 1) for n in sizes}
    timer = StageTimer(device)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    rng = random.Random(seed)
    for rep in range(repeats + 1):  # the first pass is a warm-up
        order = list(sizes)
        rng.shuffle(order)
        for n in order:
            timer.lap()
            vi = verify_inputs(trees[n], prefix_len, device, target.dtype)
            out = target_forward(target, vi.input_ids, vi.position_ids, cache, vi.attention_mask, True)
            verdict = LazyArgmax(out.hidden, target.lm_head.weight)
            verdict[0], verdict[min(1, n - 1)]
            commit_cache(cache, prefix_len, [0, 1] if n > 1 else [0])
            dt = timer.lap()
            commit_cache(cache, prefix_len, [])
            if rep:
                times[n].append(dt)
    return {n: statistics.median(v) for n, v in times.items()}


def tree_build_cost(vocab: int, budgets: list[int], depth: int = 15, repeats: int = 5,
                    device: str = "cpu", seed: int = 0) -> dict[int, dict[str, float]]:
    """Median seconds per budget of the two host-side steps around the heap.

    `candidates`: per-depth top-k + log-normalizer of the drafter logits (counted in the decode
    loop's draft stage); `tree`: heap + verify inputs (the decode loop's tree_build stage).
    """
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(depth, vocab, generator=g) * 4.0).to(device)
    builder = HeapTreeBuilder()
    out = {}
    for b in budgets:
        cand_t, tree_t = [], []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            cand = Candidates.from_logits(logits, b)
            t1 = time.perf_counter()
            verify_inputs(builder.build(5, cand, b), 256, device)
            t2 = time.perf_counter()
            cand_t.append(t1 - t0)
            tree_t.append(t2 - t1)
        out[b] = {"candidates": statistics.median(cand_t[1:]), "tree": statistics.median(tree_t[1:])}
    return out


@dataclass(frozen=True)
class FixedWidth(KeepBest):
    """A `TreePolicy` for timing: forwards the `width` best new nodes at each of `depth` depths.
    Each forwarded node offers max(top_k, width) children, so every depth has `width` nodes to forward."""

    width: int
    depth: int
    top_k: int = EagleTree.top_k
    name: str = "fixed-width"

    @property
    def max_depth(self) -> int:
        return self.depth + 1

    def children(self, budget: int) -> int:
        return max(self.top_k, self.width)

    def expand(self, pool: DraftPool, new: list[int], budget: int) -> list[int]:
        return [] if pool.depths[new[0]] > self.depth else pool.best(self.width, new)


DFLASH_REFERENCE_BUDGET = 8  # the shipped SABA calibration's reference budget (its c_draft's rounds)


def _features(drafter, n: int, g: torch.Generator) -> torch.Tensor:
    """Random target features [1, n, F] for an EAGLE-3 drafter (F = its fc's input width)."""
    w = drafter.fc.weight
    return torch.randn(1, n, drafter.fc.in_features, generator=g).to(w.device, w.dtype)


def _tokens(vocab: int, n: int, g: torch.Generator) -> list[int]:
    low = min(100, vocab // 2)  # past the special tokens of a real vocabulary
    return torch.randint(low, vocab - 1, (n,), generator=g).tolist()


@torch.inference_mode()
def ar_draft_cost_curve(drafter, widths: list[int], contexts: list[int], prefix_len: int = 256, depth: int = 3,
                        repeats: int = 5, seed: int = 0, reference=None) -> dict[str, dict[int, float]]:
    """Median seconds of an AR drafter's forwards (module doc): {"context": {n: s}, "depth": {w: s}},
    the context step with n pending pairs and a depth step forwarding w nodes. `reference` (a
    callable returning the seconds of one step of another drafter, `dflash_draft_step`) is timed once
    per repeat among the shuffled trees, so load hits it alike: its median is "reference"."""
    require(all(w >= 1 for w in widths) and all(n >= 1 for n in contexts) and depth >= 1 and repeats >= 1,
            f"AR draft costs need widths, contexts, depth and repeats >= 1, "
            f"got {widths}, {contexts}, {depth}, {repeats}")
    g = torch.Generator().manual_seed(seed)
    vocab = drafter.config.vocab_size
    kv = drafter.new_cache()
    device = drafter.fc.weight.device
    drafter(torch.tensor([_tokens(vocab, prefix_len, g)], device=device), _features(drafter, prefix_len, g),
            torch.arange(prefix_len, device=device), kv)
    ctx: dict[int, list[float]] = {n: [] for n in contexts}
    deep: dict[int, list[float]] = {w: [] for w in widths}
    ref: list[float] = []
    cases = [(w, n) for w in widths for n in contexts] + ([None] if reference is not None else [])
    rng = random.Random(seed)
    for rep in range(repeats + 1):  # the first pass is a warm-up
        rng.shuffle(cases)
        for case in cases:
            if case is None:
                dt = reference()
                ref += [dt] if rep else []
                continue
            w, n = case
            tokens = _tokens(vocab, n, g)
            st = SpecState(None, ARDraftState(kv, list(tokens)), _features(drafter, n, g), prefix_len + n, tokens[-1])
            pool = ARTreeDrafter(drafter, FixedWidth(w, depth)).grow(st, 1)
            kv.crop(prefix_len)
            require(pool.step_rows == [n] + [w] * depth, f"AR draft cost: the tree forwarded {pool.step_rows} rows, "
                    f"expected {[n] + [w] * depth}")
            if rep:
                ctx[n].append(pool.step_times[0])
                deep[w] += pool.step_times[1:]
    out = {"context": {n: statistics.median(v) for n, v in ctx.items()},
           "depth": {w: statistics.median(v) for w, v in deep.items()}}
    return {**out, "reference": statistics.median(ref)} if ref else out


def fit_ar_draft(curve: dict[str, dict[int, float]]) -> dict:
    """One line through every median of `ar_draft_cost_curve`: a forward of w input rows costs
    e0 + e1 w (least squares, e1 >= 0: clamped to 0, e0 then the mean, should noise give a negative
    slope). Returns c_ar_draft [e0, e1] and each point's rows, measured and fitted seconds."""
    points = [("context", n, t) for n, t in curve["context"].items()]
    points += [("depth", w, t) for w, t in curve["depth"].items()]
    rows = np.array([p[1] for p in points], dtype=float)
    secs = np.array([p[2] for p in points], dtype=float)
    e1, e0 = np.polyfit(rows, secs, 1) if len(set(rows)) > 1 else (0.0, float(secs.mean()))
    if e1 < 0:
        e1, e0 = 0.0, float(secs.mean())
    fitted = e0 + e1 * rows
    require(e0 > 0, f"AR draft cost fit: intercept e0 = {e0} <= 0 (measure more widths, or more repeats)")
    return {"c_ar_draft": [float(e0), float(e1)],
            "points": [{"step": k, "rows": int(r), "s": float(t), "fit_s": float(f)}
                       for (k, r, t), f in zip(points, fitted)],
            "mean_abs_rel_error": float(np.mean(np.abs(fitted - secs) / secs))}


def dflash_draft_step(pair, context: int = 4, budget: int = 32, prefix_len: int = 256, seed: int = 0):
    """A callable timing one DFlash draft step (the decode loop's `draft`: block forward + top-k of
    `budget`) with `context` pending features over a drafter cache of `prefix_len` positions; it
    restores the cache after each step."""
    from graftlib.methods.decoder import Decoder

    loop = Decoder.for_method(pair.target, pair.drafter, "ddtree", budget, eos_ids=[])
    g = torch.Generator().manual_seed(seed)
    cache = pair.drafter.new_cache()
    st = SpecState(None, cache, _features(pair.drafter, prefix_len, g), prefix_len, 5)
    with torch.inference_mode():
        loop.draft(st, budget)  # fills the drafter cache with the prefix
    keys, values, ctx_len = list(cache.keys), list(cache.values), cache.ctx_len
    timer = StageTimer(pair.device)

    @torch.inference_mode()
    def step() -> float:
        st.features, st.start = _features(pair.drafter, context, g), prefix_len + context
        timer.lap()
        loop.draft(st, budget)
        dt = timer.lap()
        cache.keys, cache.values, cache.ctx_len = list(keys), list(values), ctx_len
        return dt

    return step


def dflash_draft_cost(pair, context: int = 4, budget: int = 32, prefix_len: int = 256, repeats: int = 5,
                      seed: int = 0) -> float:
    """Median seconds of `dflash_draft_step` over `repeats` steps after a warm-up."""
    step = dflash_draft_step(pair, context, budget, prefix_len, seed)
    step()
    return statistics.median(step() for _ in range(repeats))


def add_parser(sub) -> None:
    p = sub.add_parser("costs", help="verify-forward cost curve and tree-building cost on this machine")
    add_model_args(p)
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128,
                                                            192, 256])
    p.add_argument("--budgets", nargs="+", type=int, default=[16, 32, 64, 128, 256, 512])
    p.add_argument("--prefix-len", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="JSONL file (default results/costs.jsonl)")
    add_ar_drafter_arg(p)
    p.add_argument("--ar-draft", action="store_true",
                   help="measure the AR drafter's forwards (EAGLE-3 / OPT-Tree rounds' c_ar_draft) instead of the "
                   "verify and tree-building costs")
    p.add_argument("--ar-widths", nargs="+", type=int, default=[1, 5, 10, 25, 50],
                   help="frontier widths of the depth steps (EAGLE-3's release: 10; OPT-Tree's: up to 50)")
    p.add_argument("--ar-contexts", nargs="+", type=int, default=[1, 4, 9],
                   help="pending pairs of the context step (the previous round's accepted tokens)")
    p.add_argument("--ar-depth", type=int, default=3, help="depth steps per timed tree")
    p.add_argument("--cost-profile", default=None, metavar="FILE",
                   help="--ar-draft: the profile --profile-out extends (default: the shipped CPU profile's SABA costs)")
    p.add_argument("--profile-out", default=None, metavar="FILE",
                   help="--ar-draft: write --cost-profile's profile with the measured c_ar_draft here")
    p.add_argument("--ar-draft-out", default=None, metavar="FILE",
                   help="--ar-draft: write the AR drafter cost file here (the shipped one: "
                   "graftlib/assets/costs/cpu-ar-draft.json)")
    p.add_argument("--scale-to-profile", action="store_true",
                   help="--ar-draft: scale the fit by the profile's c_draft / DFlash's draft step timed in the same "
                   "run (a loaded machine's times brought to the profile's conditions)")
    p.add_argument("--note", default=None, help="--ar-draft: a remark stored with the measurement (e.g. the load)")
    p.set_defaults(func=run)


def run(args) -> int:
    from graftlib.models.pair import load_pair

    require(all(s >= 1 for s in args.sizes), "--sizes must be >= 1")
    require(all(b >= 1 for b in args.budgets), "--budgets must be >= 1")
    require(args.ar_draft or not (args.profile_out or args.ar_draft_out),
            "--profile-out / --ar-draft-out need --ar-draft")
    base = None  # --ar-draft: the profile it extends (a bad file fails before the models load)
    if args.ar_draft:
        base = CostProfile.load(args.cost_profile) if args.cost_profile else saba_profile()
    pair = load_pair(args.target, args.drafter, args.device, args.device_map, args.eagle3, args.dtype)
    if args.ar_draft:
        return run_ar_draft(args, pair, base)
    curve = verify_cost_curve(pair.target, args.sizes, args.prefix_len, args.repeats)
    build = tree_build_cost(pair.target.config.vocab_size, args.budgets, pair.drafter.block_size - 1,
                            args.repeats, str(pair.device))
    base = curve[min(curve)]
    print(f"verify step at prefix {args.prefix_len} ({pair.describe()['device']}, {torch.get_num_threads()} threads)")
    print(f"{'tokens':>6} {'ms':>8} {'x 1-token':>9}")
    for n, t in curve.items():
        print(f"{n:>6} {1000 * t:>8.1f} {t / base:>9.2f}")
    print(f"\n{'budget':>6} {'topk ms':>8} {'tree ms':>8} {'verify ms':>9} {'tree/verify':>11} "
          f"{'(topk+tree)/verify':>18}")
    for b, t in build.items():
        v = interpolate(curve, b + 1)
        print(f"{b:>6} {1000 * t['candidates']:>8.2f} {1000 * t['tree']:>8.2f} {1000 * v:>9.1f} "
              f"{100 * t['tree'] / v:>10.2f}% {100 * (t['candidates'] + t['tree']) / v:>17.2f}%")
    print("verify beyond the largest measured size is extrapolated proportionally")
    out = args.out or results_dir() / "costs.jsonl"
    append_record(out, {"setting": pair.describe(), "prefix_len": args.prefix_len, "repeats": args.repeats,
                        "verify_s": curve, "tree_build_s": build, "time": time.time()})
    return 0


def ar_draft_command(args) -> str:
    """The command line that reproduces an `--ar-draft` measurement (threads via OMP_NUM_THREADS)."""
    parts = [f"OMP_NUM_THREADS={torch.get_num_threads()}", AR_DRAFT_COMMAND]
    for flag, value in (("--target", args.target), ("--drafter", args.drafter), ("--eagle3", args.eagle3),
                        ("--device", args.device), ("--cost-profile", args.cost_profile)):
        if value is not None:
            parts += [flag, str(value)]
    parts += ["--scale-to-profile"] if args.scale_to_profile else []
    parts += ["--ar-widths", *map(str, args.ar_widths), "--ar-contexts", *map(str, args.ar_contexts),
              "--ar-depth", str(args.ar_depth), "--prefix-len", str(args.prefix_len), "--repeats", str(args.repeats)]
    return " ".join(parts)


def run_ar_draft(args, pair, base) -> int:
    """`graft costs --ar-draft` (module doc): print the medians and the fit, append a record, write
    the AR drafter cost file and / or the extended profile where asked."""
    drafter = pair.eagle3_drafter()
    load_before = os.getloadavg()[0]
    reference = dflash_draft_step(pair, budget=DFLASH_REFERENCE_BUDGET, prefix_len=args.prefix_len)
    curve = ar_draft_cost_curve(drafter, args.ar_widths, args.ar_contexts, args.prefix_len, args.ar_depth,
                                args.repeats, reference=reference)
    fit, dflash = fit_ar_draft(curve), curve["reference"]
    factor = base.c_draft / dflash if args.scale_to_profile else 1.0
    c_ar_draft = [factor * e for e in fit["c_ar_draft"]]
    setting = {**pair.describe(), **pair.eagle3_describe()}
    print(f"AR drafter forwards at prefix {args.prefix_len} ({setting['hardware']}, {torch.get_num_threads()} threads)")
    print(f"{'step':>7} {'rows':>5} {'ms':>8} {'fit ms':>8}")
    for p in fit["points"]:
        print(f"{p['step']:>7} {p['rows']:>5} {1000 * p['s']:>8.2f} {1000 * p['fit_s']:>8.2f}")
    e0, e1 = fit["c_ar_draft"]
    print(f"fit: {1000 * e0:.3f} ms per forward + {1000 * e1:.3f} ms per row (mean |error| "
          f"{100 * fit['mean_abs_rel_error']:.1f}%); EAGLE-3's release round (context of 4, 7 x 10 rows): "
          f"{1000 * (8 * e0 + 74 * e1):.1f} ms")
    print(f"DFlash draft step, same run: {1000 * dflash:.2f} ms (cost profile {base.name} c_draft: "
          f"{1000 * base.c_draft:.2f} ms)")
    if args.scale_to_profile:
        print(f"c_ar_draft scaled by c_draft / DFlash's = {factor:.3f}: {1000 * c_ar_draft[0]:.3f} ms per forward + "
              f"{1000 * c_ar_draft[1]:.3f} ms per row")
    record = {"schema": AR_DRAFT_SCHEMA, "c_ar_draft": c_ar_draft, "command": ar_draft_command(args),
              "date": datetime.now().strftime("%Y-%m-%d %H:%M:%S"), "drafter": setting["eagle3"],
              "eagle3_id": setting["eagle3_id"], "hardware": setting["hardware"], "device": setting["device"],
              "dtype": setting["dtype"], "threads": torch.get_num_threads(), "prefix_len": args.prefix_len,
              "repeats": args.repeats, "depth_steps": args.ar_depth, "fit": fit,
              "scale": {"factor": factor, "dflash_draft_s": dflash, "profile": base.label,
                        "profile_c_draft_s": base.c_draft, "scaled": args.scale_to_profile},
              "load_avg_1m": [load_before, os.getloadavg()[0]], **({"note": args.note} if args.note else {})}
    append_record(args.out or results_dir() / "costs.jsonl", {"kind": "ar-draft", **record, "time": time.time()})
    if args.ar_draft_out:
        Path(args.ar_draft_out).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.ar_draft_out, record)
        print(f"AR drafter cost written to {args.ar_draft_out}")
    if args.profile_out:
        provenance = {k: record[k] for k in ("command", "date", "drafter", "eagle3_id", "hardware", "threads")}
        out = with_ar_draft(base, c_ar_draft, {**provenance, "scale_factor": factor}).save(args.profile_out)
        print(f"cost profile {base.name} with c_ar_draft written to {out}")
    return 0
