"""Cost curves on the machine at hand: verify forward vs tree size, and tree building vs budget.

On a GPU verification is nearly flat up to ~100 nodes; on a CPU it is not, and this curve
decides whether speculation pays and which budgets are worth having (SABA's cost model, eq. 17,
is fitted to measurements like these). Protocol: a prefix of `prefix_len` tokens is prefilled
once; for every repeat, every size is measured in shuffled order (drift hits all sizes alike);
each measurement is the full verify step of the decode loop (mask/positions from
`verify_inputs`, target body with hidden states, LM head on 2 walk rows, cache commit of 2 nodes)
and the cache is cropped back afterwards. Medians are reported.

`graft costs` prints both tables and writes one JSON record to results/costs.jsonl.
"""

import random
import statistics
import time

import torch

from graftlib.core.builders import Candidates, HeapTreeBuilder
from graftlib.core.errors import require
from graftlib.core.kvcache import target_cache
from graftlib.core.paths import results_dir
from graftlib.core.records import append_record
from graftlib.core.timing import StageTimer
from graftlib.core.tree import verify_inputs
from graftlib.core.verify import LazyArgmax, commit_cache, target_forward
from graftlib.methods.args import add_model_args
from graftlib.methods.caddtree import interpolate


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
    cache = target_cache(target.config, prefix_len + max(sizes) + 1)
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


def add_parser(sub) -> None:
    p = sub.add_parser("costs", help="verify-forward cost curve and tree-building cost on this machine")
    add_model_args(p)
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256])
    p.add_argument("--budgets", nargs="+", type=int, default=[16, 32, 64, 128, 256, 512])
    p.add_argument("--prefix-len", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="JSONL file (default results/costs.jsonl)")
    p.set_defaults(func=run)


def run(args) -> int:
    from graftlib.models.pair import load_pair

    require(all(s >= 1 for s in args.sizes), "--sizes must be >= 1")
    require(all(b >= 1 for b in args.budgets), "--budgets must be >= 1")
    pair = load_pair(args.target, args.drafter, args.device, args.device_map)
    curve = verify_cost_curve(pair.target, args.sizes, args.prefix_len, args.repeats)
    build = tree_build_cost(pair.target.config.vocab_size, args.budgets, pair.drafter.block_size - 1,
                            args.repeats, str(pair.device))
    base = curve[min(curve)]
    print(f"verify step at prefix {args.prefix_len} ({pair.describe()['device']}, {torch.get_num_threads()} threads)")
    print(f"{'tokens':>6} {'ms':>8} {'x 1-token':>9}")
    for n, t in curve.items():
        print(f"{n:>6} {1000 * t:>8.1f} {t / base:>9.2f}")
    print(f"\n{'budget':>6} {'topk ms':>8} {'tree ms':>8} {'verify ms':>9} {'tree/verify':>11} {'(topk+tree)/verify':>18}")
    for b, t in build.items():
        v = interpolate(curve, b + 1)
        print(f"{b:>6} {1000 * t['candidates']:>8.2f} {1000 * t['tree']:>8.2f} {1000 * v:>9.1f} "
              f"{100 * t['tree'] / v:>10.2f}% {100 * (t['candidates'] + t['tree']) / v:>17.2f}%")
    print("verify beyond the largest measured size is extrapolated proportionally")
    out = args.out or results_dir() / "costs.jsonl"
    append_record(out, {"setting": pair.describe(), "prefix_len": args.prefix_len, "repeats": args.repeats,
                        "verify_s": curve, "tree_build_s": build, "time": time.time()})
    return 0
