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

from graftlib.builders import Candidates, HeapTreeBuilder
from graftlib.decode import StageTimer
from graftlib.kvcache import target_cache
from graftlib.tree import verify_inputs
from graftlib.verify import LazyArgmax, commit_cache, target_forward


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
    prompt = torch.randint(100, vocab - 1, (1, prefix_len), generator=torch.Generator().manual_seed(seed))
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
                    device: str = "cpu", seed: int = 0) -> dict[int, float]:
    """Median seconds for top-k + heap + verify_inputs at each budget (the tree_build stage)."""
    out = {}
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(depth, vocab, generator=g) * 4.0).to(device)
    builder = HeapTreeBuilder()
    for b in budgets:
        ts = []
        for _ in range(repeats + 1):
            t = time.perf_counter()
            cand = Candidates.from_logits(logits, b)
            tree = builder.build(5, cand, b)
            verify_inputs(tree, 256, device)
            ts.append(time.perf_counter() - t)
        out[b] = statistics.median(ts[1:])
    return out


def add_parser(sub) -> None:
    from graftlib.generate import add_model_args

    p = sub.add_parser("costs", help="verify-forward cost curve and tree-building cost on this machine")
    add_model_args(p)
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256])
    p.add_argument("--budgets", nargs="+", type=int, default=[16, 32, 64, 128, 256, 512])
    p.add_argument("--prefix-len", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="JSONL file (default results/costs.jsonl)")
    p.set_defaults(func=run)


def run(args) -> int:
    from graftlib.errors import require
    from graftlib.models import load_pair
    from graftlib.paths import results_dir
    from graftlib.records import append_record

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
    print(f"\n{'budget':>6} {'build ms':>9} {'verify ms':>9} {'share':>7}")
    for b, t in build.items():
        v = curve.get(b + 1)
        share = f"{100 * t / v:>6.2f}%" if v else "      -"
        print(f"{b:>6} {1000 * t:>9.2f} {1000 * v if v else float('nan'):>9.1f} {share}")
    out = args.out or results_dir() / "costs.jsonl"
    append_record(out, {"setting": pair.describe(), "prefix_len": args.prefix_len, "repeats": args.repeats,
                        "verify_s": curve, "tree_build_s": build, "time": time.time()})
    return 0
