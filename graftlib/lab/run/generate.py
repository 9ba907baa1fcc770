"""`graft generate`: decode one prompt with one method and print the text and round statistics.

`--rounds` prints every round; `--show-tree` every round's draft tree (`graftlib.lab.report.tree_view`:
tokens, path scores, the accepted path and the bonus token); `--stages` prints the mean round's stage breakdown, with an
AR drafter's (eagle3, opt-tree) draft step split into its drafter forwards: the context step, then
one per depth (`RoundRecord.t_draft_steps`), so an EAGLE-3 round reads beside a DDTree round's.
"""

import statistics

from graftlib.core.errors import require
from graftlib.inputs.cli_args import (
    add_ar_drafter_arg,
    add_method_args,
    add_model_args,
    add_sampling_args,
    method_inputs,
    sampling_from_args,
)
from graftlib.lab.report.tree_view import tree_lines
from graftlib.methods.decoder import Decoder, drafter_for
from graftlib.methods.registry import AR_METHODS, METHODS

STAGES = ("draft", "tree", "verify", "commit")


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="decode one prompt and print text + round statistics")
    add_model_args(p)
    add_ar_drafter_arg(p)
    add_method_args(p)
    add_sampling_args(p)
    p.add_argument("--prompt", required=True, help="user message (wrapped in the chat template)")
    p.add_argument("--method", default="ddtree", help=f"one of {', '.join(METHODS)}")
    p.add_argument("--budget", type=int, default=32, help="draft nodes per round (dflash: drafts per round)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--rounds", action="store_true", help="print every round, not only the summary")
    p.add_argument("--show-tree", action="store_true",
                   help="print every round's draft tree: tokens, path scores, accepted path (*), bonus token")
    p.add_argument("--stages", action="store_true",
                   help="print the mean round's stages (ms), an AR drafter's draft step per drafter forward")
    p.set_defaults(func=run)


def stage_lines(rounds) -> list[str]:
    """The mean round's stages in ms; the draft step's drafter forwards (context, depth 1, ...) when
    recorded, each averaged over the rounds that ran it."""
    lines = [f"{'stage':<14} {'ms/round':>9} {'rounds':>6}"]
    for k in STAGES:
        lines.append(f"{k:<14} {1000 * statistics.fmean(getattr(r, f't_{k}') for r in rounds):>9.2f} {len(rounds):>6}")
        steps = [r.t_draft_steps for r in rounds if k == "draft" and r.t_draft_steps]
        for j in range(max(map(len, steps), default=0)):
            times = [s[j] for s in steps if len(s) > j]
            name = "  context" if j == 0 else f"  depth {j}"
            lines.append(f"{name:<14} {1000 * statistics.fmean(times):>9.2f} {len(times):>6}")
    return lines


def run(args) -> int:
    from graftlib.models.pair import load_pair

    require(args.method in METHODS, f"unknown method {args.method!r}: choose from {', '.join(METHODS)}")
    require(args.prompt.strip() != "", "empty prompt: pass some text with --prompt")
    sampling = sampling_from_args(args)
    inputs = method_inputs(args)
    pair = load_pair(args.target, args.drafter, args.device, args.device_map, args.eagle3, args.dtype)
    decoder = Decoder.for_method(pair.target, drafter_for(pair, args.method), args.method, args.budget,
                                 eos_ids=pair.eos_ids, inputs=inputs, sampling=sampling, pair=pair.identity())
    res = decoder.decode(pair.prompt_ids(args.prompt), args.max_new_tokens, record_trees=args.show_tree)
    print(pair.tokenizer.decode(res.tokens, skip_special_tokens=True))
    print()
    drafter = f"eagle3={pair.eagle3_describe()['eagle3']}" if args.method in AR_METHODS else \
        f"drafter_trained={pair.drafter_trained}"
    print(f"method={args.method} budget={args.budget if args.method != 'ar' else '-'} "
          f"{drafter} prompt_tokens={res.prompt_len} new_tokens={len(res.tokens)} "
          f"stop={res.stop} temperature={sampling.temperature}"
          + (f" top_p={sampling.top_p} seed={sampling.seed}" if not sampling.greedy else ""))
    print(f"rounds={len(res.rounds) or len(res.tokens) - 1} MAT={res.mat:.2f} tokens/s={res.tokens_per_s:.1f} "
          f"prefill={1000 * res.prefill_s:.0f} ms")
    if res.rounds:
        print("per round (ms): " + "  ".join(f"{k}={v:.1f}" for k, v in res.stage_ms().items()))
    if args.show_tree:
        def text(token: int) -> str:
            return pair.tokenizer.decode([token])

        for t, r in enumerate(res.rounds):
            print(f"\nround {t}: " + ("an AR step (no draft)" if r.tree is None else ""))
            if r.tree is not None:
                print("\n".join(tree_lines(r, text)))
    if args.stages and res.rounds:
        print("\n".join(stage_lines(res.rounds)))
    if args.rounds:
        print(f"{'t':>4} {'acc':>4} {'B':>5} {'nodes':>5} {'prefix':>6} {'draft':>7} {'tree':>7} {'verify':>7} "
              f"{'commit':>7}"
              "  draft forwards")
        for t, r in enumerate(res.rounds):
            steps = "/".join(f"{1000 * x:.1f}" for x in r.t_draft_steps or [])
            print(f"{t:>4} {r.accepted:>4} {r.budget:>5} {r.nodes:>5} {r.prefix_len:>6} {1000 * r.t_draft:>7.1f} "
                  f"{1000 * r.t_tree:>7.1f} {1000 * r.t_verify:>7.1f} {1000 * r.t_commit:>7.1f}  {steps}")
    return 0
