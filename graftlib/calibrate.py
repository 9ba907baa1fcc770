"""`graft calibrate`: fit SABA's cost (eq. 17) and gain (eq. 16) on this machine and save them.

Cost: for every prefix length P of a grid a random prefix is prefilled once; then for every
budget B (shuffled per repeat, medians kept, first pass a warm-up) one `Decoder.tree_round` runs
on random peaky candidates (tree build + verify inputs + target verify + greedy walk + commit, as
in the decode loop) and the cache is cropped back. (c0, c1, c2) come from least squares over the
(B, P, latency) medians; c0 then gets the median draft-step time of the replayed rounds (constant
in B), so C_t(B) is the whole round latency.

Gain: same-prefix replay (`graftlib.replay`) of a reference ddtree trajectory on held-out
validation prompts (`data.pool("val")`, never evaluation prompts) over the budget grid gives
a_t(B) and s_t per round; (phi, alpha) are fitted by least squares (`saba.fit_gain`) and
`hist_prior` is the mean accepted length of the reference rounds (while replaying, the first
round of each trajectory sees hist_t = 2.0, the builtin prior, as no fitted one exists yet).

The saved JSON (`SabaParams`) records hardware, target, drafter, date, grid, prompt count and
fit quality; its `id` (a hash of the numbers) is what replay records name as their calibration.
`offline_tracking` scores any parameters on replay records: retained oracle throughput of the
budgets SABA would have picked, using the measured a_t(B) / l_t(B).
"""

import random
import statistics
import sys
from dataclasses import replace

import numpy as np
import torch

from graftlib.builders import Candidates, FixedBudget, HeapTreeBuilder
from graftlib.decode import Decoder, SpecState, StageTimer
from graftlib.drafter import DraftCache
from graftlib.errors import require
from graftlib.kvcache import target_cache
from graftlib.replay import ReplayDecoder, ReplayRecord
from graftlib.saba import CPU_GRID, DEFAULT_PATH, SabaParams, choose, fit_cost, fit_gain
from graftlib.verify import commit_cache, target_forward


@torch.inference_mode()
def measure_cost_grid(target, drafter, budgets: list[int], prefix_lens: list[int], repeats: int = 3,
                      seed: int = 0) -> list[dict]:
    """Median seconds of tree build + verify + commit per (budget, prefix length)."""
    require(all(b >= 1 for b in budgets) and all(p >= 1 for p in prefix_lens), "budgets/prefix lengths must be >= 1")
    device = target.device
    vocab = target.config.vocab_size
    depth = drafter.block_size - 1
    dec = Decoder(target, drafter, HeapTreeBuilder(), FixedBudget(max(budgets)))
    g = torch.Generator().manual_seed(seed)
    cand = Candidates.from_logits(torch.randn(depth, vocab, generator=g) * 4.0, max(budgets))
    rng = random.Random(seed)
    timer = StageTimer(device)
    out = []
    for p in prefix_lens:
        cache = target_cache(target.config, p + max(budgets) + 1)
        prompt = torch.randint(0, vocab, (1, p), generator=g).to(device)
        target_forward(target, prompt, torch.arange(p, device=device)[None], cache)
        st = SpecState(cache, DraftCache.empty(len(drafter.layers)), None, p, 1)
        times: dict[int, list[float]] = {b: [] for b in budgets}
        for rep in range(repeats + 1):
            order = list(budgets)
            rng.shuffle(order)
            for b in order:
                timer.lap()
                r = dec.tree_round(st, cand, b, timer).record
                commit_cache(cache, p, [])
                if rep:
                    times[b].append(r.t_tree + r.t_verify + r.t_commit)
        out += [{"budget": b, "prefix_len": p, "latency_s": statistics.median(v)} for b, v in times.items()]
    return out


def replay_rounds(target, drafter, prompts: list[list[int]], grid: list[int], ref_budget: int,
                  max_new_tokens: int, eos_ids=None, window: int = 8, hist_prior: float = 2.0) -> list[ReplayRecord]:
    """Replay records of reference ddtree@ref_budget trajectories over `grid`; rounds numbered globally."""
    dec = ReplayDecoder(target, drafter, HeapTreeBuilder(), FixedBudget(ref_budget), grid, 1, window, hist_prior,
                        eos_ids)
    records: list[ReplayRecord] = []
    for ids in prompts:
        base = 1 + max((r.round for r in records), default=-1)
        records += [replace(r, round=base + r.round) for r in dec.replay(ids, max_new_tokens).records]
    return records


def fit_params(cost_samples: list[dict], records: list[ReplayRecord], grid: list[int], depth: int,
               window: int = 8, utility: str = "throughput", lam_min: float = 0.5, meta: dict | None = None) -> SabaParams:
    """SabaParams from cost-grid samples and replay records (see module doc)."""
    c, r2 = fit_cost([s["budget"] for s in cost_samples], [s["prefix_len"] for s in cost_samples],
                     [s["latency_s"] for s in cost_samples])
    ref = [r for r in records if r.reference]
    on_grid = [r for r in records if not r.reference]
    require(len(ref) > 0 and len(on_grid) > 0, "no replayed rounds to fit the gain on")
    c[0] += statistics.median(r.t_draft for r in ref)
    phi, alpha, rmse = fit_gain([r.state for r in on_grid], [r.budget for r in on_grid],
                                [r.accepted for r in on_grid], lam_min, depth)
    hist_prior = float(np.mean([r.accepted for r in ref]))
    fit = {"cost_r2": r2, "gain_rmse_tokens": rmse, "cost_points": len(cost_samples), "rounds": len(ref)}
    params = SabaParams(phi=phi, alpha=alpha, c=c, grid=sorted(set(grid)), window=window, hist_prior=hist_prior,
                        lam_min=lam_min, utility=utility, meta={**(meta or {}), "fit": fit})
    return params


def offline_tracking(params: SabaParams, records: list[ReplayRecord], depth: int | None = None) -> dict:
    """Retained oracle throughput of SABA's choices on replay records (measured a_t(B) / l_t(B))."""
    rounds: dict[int, list[ReplayRecord]] = {}
    for r in records:
        if not r.reference:
            rounds.setdefault(r.round, []).append(r)
    retained = []
    for recs in rounds.values():
        by_b = {r.budget: r for r in recs}
        grid = np.array(sorted(b for b in by_b if b in params.grid) or sorted(by_b), dtype=float)
        b = choose(params, grid, np.array(recs[0].state), recs[0].prefix_len, depth)
        retained.append(by_b[b].tps / max(r.tps for r in recs))
    ret = np.array(retained)
    return {"rounds": len(ret), "mean_retained": float(ret.mean()), "frac_ge_95": float((ret >= 0.95).mean())}


# ----------------------------------------------------------------------------- CLI


def add_parser(sub) -> None:
    from graftlib.generate import add_model_args

    p = sub.add_parser("calibrate", help="fit SABA's cost and gain models on this machine (validation prompts)")
    add_model_args(p)
    p.add_argument("--grid", nargs="+", type=int, default=list(CPU_GRID), help="SABA budget grid "
                   "(paper, GPU: 32 48 .. 512)")
    p.add_argument("--prefix-lens", nargs="+", type=int, default=[64, 128, 256, 512])
    p.add_argument("--repeats", type=int, default=3, help="timing repeats per cost-grid point")
    p.add_argument("--val-prompts", type=int, default=8, help="validation prompts to replay for the gain fit")
    p.add_argument("--ref-budget", type=int, default=8, help="budget of the reference ddtree trajectories")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-prompt-tokens", type=int, default=384)
    p.add_argument("--window", type=int, default=8, help="acceptance history window w")
    p.add_argument("--utility", default="throughput", help="throughput (default) or paper (G/C)")
    p.add_argument("--out", default=str(DEFAULT_PATH), help="parameters JSON (default: what ddtree+saba loads)")
    p.set_defaults(func=run)


def run(args) -> int:
    from graftlib.data import format_prompt, pool
    from graftlib.models import load_pair
    from graftlib.saba import calibration_meta

    require(args.val_prompts >= 1, "--val-prompts must be >= 1")
    pair = load_pair(args.target, args.drafter, args.device, args.device_map)
    print(f"cost grid: budgets {args.grid} x prefixes {args.prefix_lens} ...", flush=True)
    cost_samples = measure_cost_grid(pair.target, pair.drafter, args.grid, args.prefix_lens, args.repeats)
    prompts = [format_prompt(item, pair.tokenizer, args.max_prompt_tokens).input_ids
               for item in pool("val", args.val_prompts)]
    print(f"replaying {len(prompts)} validation prompts over the grid ...", flush=True)
    records = replay_rounds(pair.target, pair.drafter, prompts, args.grid, args.ref_budget, args.max_new_tokens,
                            pair.eos_ids, args.window)
    depth = pair.drafter.block_size - 1
    meta = calibration_meta(pair.describe(), grid=args.grid, prefix_lens=args.prefix_lens,
                            val_prompts=len(prompts), ref_budget=args.ref_budget, max_new_tokens=args.max_new_tokens,
                            command="graft " + " ".join(sys.argv[1:]))
    params = fit_params(cost_samples, records, args.grid, depth, args.window, args.utility, meta=meta)
    params.meta["offline_tracking"] = offline_tracking(params, records, depth)
    path = params.save(args.out)
    fit = params.meta["fit"]
    print(f"c = {params.c} (R^2 {fit['cost_r2']:.3f}); phi = {params.phi}; alpha = {params.alpha} "
          f"(RMSE {fit['gain_rmse_tokens']:.2f} tokens); hist_prior = {params.hist_prior:.2f}")
    print(f"in-sample retained oracle throughput: {params.meta['offline_tracking']}")
    print(f"saved {path} (id {params.id})")
    return 0
