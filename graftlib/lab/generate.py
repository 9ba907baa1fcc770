"""`graft generate`: decode one prompt with one method and print the text and round statistics."""

from graftlib.core.errors import require
from graftlib.methods.args import (
    add_method_args,
    add_model_args,
    add_sampling_args,
    method_inputs,
    sampling_from_args,
)
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import METHODS


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="decode one prompt and print text + round statistics")
    add_model_args(p)
    add_method_args(p)
    add_sampling_args(p)
    p.add_argument("--prompt", required=True, help="user message (wrapped in the chat template)")
    p.add_argument("--method", default="ddtree", help=f"one of {', '.join(METHODS)}")
    p.add_argument("--budget", type=int, default=32, help="draft nodes per round (dflash: drafts per round)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--rounds", action="store_true", help="print every round, not only the summary")
    p.set_defaults(func=run)


def run(args) -> int:
    from graftlib.models.pair import load_pair

    require(args.method in METHODS, f"unknown method {args.method!r}: choose from {', '.join(METHODS)}")
    require(args.prompt.strip() != "", "empty prompt: pass some text with --prompt")
    sampling = sampling_from_args(args)
    tdes, saba = method_inputs(args)
    pair = load_pair(args.target, args.drafter, args.device, args.device_map)
    decoder = Decoder.for_method(pair.target, pair.drafter, args.method, args.budget, pair.eos_ids, tdes, args.beta,
                                 sampling, saba, pair.identity())
    res = decoder.decode(pair.prompt_ids(args.prompt), args.max_new_tokens)
    print(pair.tokenizer.decode(res.tokens, skip_special_tokens=True))
    print()
    print(f"method={args.method} budget={args.budget if args.method != 'ar' else '-'} "
          f"drafter_trained={pair.drafter_trained} prompt_tokens={res.prompt_len} new_tokens={len(res.tokens)} "
          f"stop={res.stop} temperature={sampling.temperature}"
          + (f" top_p={sampling.top_p} seed={sampling.seed}" if not sampling.greedy else ""))
    print(f"rounds={len(res.rounds) or len(res.tokens) - 1} MAT={res.mat:.2f} tokens/s={res.tokens_per_s:.1f} "
          f"prefill={1000 * res.prefill_s:.0f} ms")
    if res.rounds:
        print("per round (ms): " + "  ".join(f"{k}={v:.1f}" for k, v in res.stage_ms().items()))
    if args.rounds:
        print(f"{'t':>4} {'acc':>4} {'B':>5} {'nodes':>5} {'prefix':>6} {'draft':>7} {'tree':>7} {'verify':>7} {'commit':>7}")
        for t, r in enumerate(res.rounds):
            print(f"{t:>4} {r.accepted:>4} {r.budget:>5} {r.nodes:>5} {r.prefix_len:>6} {1000 * r.t_draft:>7.1f} "
                  f"{1000 * r.t_tree:>7.1f} {1000 * r.t_verify:>7.1f} {1000 * r.t_commit:>7.1f}")
    return 0
