"""`graft bench`: methods x budgets over prompts, interleaved per prompt, resumable.

Protocol (the AR baseline is the denominator of every speedup, so it gets the same care): every method is
warmed per tree-size bucket until two short decodes agree within 10% (`warm_up`), each record naming how
many ran; prompts are the outer loop and runs the inner one; AR brackets each prompt's other runs (decoded
first, as the exactness reference, and again after them; `decode_s` is the mean of both); every greedy
decode gets an exactness verdict against AR (`graftlib.core.exactness`); multi-turn prompts decode turn by
turn; `hf` is `transformers`' own `generate`, timed the same way. A walked bench (`walk`) times nothing but
AR, and may take AR's record of another setting that decoded the same prompt the same way (`reusable_ar`).
One JSON record per (prompt, run) is appended; finished (setting, prompt, run) triples are skipped.

Details: docs/internals.md, `graftlib.lab.run.bench`.
"""

import json
import math
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import results_dir
from graftlib.core.records import append_record, setting_id
from graftlib.core.sampling import GREEDY, Sampling, prompt_sampling
from graftlib.core.timing import WarmUp, warm_up
from graftlib.core.tree import parent_mismatch
from graftlib.core.version import __version__
from graftlib.inputs.cli_args import (
    add_ar_drafter_arg,
    add_method_args,
    add_model_args,
    add_sampling_args,
    method_inputs,
    sampling_from_args,
)
from graftlib.inputs.cost_profile import CostProfile, RoundShape, default_profile, load_profile
from graftlib.lab.report.metrics import decoded_tokens, format_table, summarize
from graftlib.lab.report.modeled import format_validation, price, reprice, validate
from graftlib.lab.report.multiturn import TURNS, decode_turns, judge, matches, turn_uid, user_turns
from graftlib.lab.run.costs.machine_costs import deciding, machine_profile
from graftlib.methods.decoder import Decoder, WalkedDecoder, drafter_for
from graftlib.methods.registry import (
    ADAPTIVE_METHODS,
    AR_METHODS,
    CHAIN_METHODS,
    FITTED_METHODS,
    METHODS,
    REGISTRY,
    SHIPPED_INPUTS,
    MethodInputs,
)
from graftlib.models.strength import TaskStrengths

BASELINES = ("hf",)


@dataclass(frozen=True)
class Run:
    method: str
    budget: int | None

    @property
    def key(self) -> str:
        return self.method if self.budget is None else f"{self.method}@{self.budget}"


@dataclass(frozen=True)
class BenchPrompt:
    task: str
    uid: str
    input_ids: tuple[int, ...]
    truncated_from: int | None = None
    # every user message of a multi-turn prompt (graftlib.lab.report.multiturn); () = one turn
    user_turns: tuple[str, ...] = ()


def parse_runs(methods: list[str], budgets: list[int], chain_budgets: list[int],
               caps: list[int] | None = None) -> list[Run]:
    """ar/hf -> one run; dflash -> one per chain budget; fixed-budget trees -> one per budget;
    adaptive methods -> one per cap (default: the budgets); `method@B` -> that one run."""
    runs = []
    for m in methods:
        m, at, b = m.partition("@")
        require(m in METHODS or m in BASELINES,
                f"unknown method {m!r}: choose from {', '.join(METHODS + BASELINES)}")
        if at:
            require(b.isdigit() and m not in ("ar", "hf"), f"bad run {m}@{b}: expected method@budget, e.g. ddtree@16")
            runs.append(Run(m, int(b)))
        elif m in ("ar", "hf"):
            runs.append(Run(m, None))
        else:
            sizes = chain_budgets if m in CHAIN_METHODS else (caps or budgets) if m in ADAPTIVE_METHODS else budgets
            runs.extend(Run(m, b) for b in sizes)
    for r in runs:
        require(r.budget is None or r.budget >= 1, f"budget must be >= 1, got {r.budget} for {r.method}")
    if not any(r.method == "ar" for r in runs):
        runs.insert(0, Run("ar", None))  # the denominator is always measured
    return runs


def hf_generate(pair, prompt_ids: list[int], max_new_tokens: int) -> tuple[list[int], float, float]:
    """HF greedy generate; returns (new tokens, prefill_s, decode_s) with a first-token timestamp."""
    import torch

    class FirstToken:
        def __init__(self):
            self.calls, self.t_first = 0, None

        def put(self, value):
            self.calls += 1
            if self.calls == 2:  # call 1 is the prompt, call 2 the first new token
                self.t_first = time.perf_counter()

        def end(self):
            pass

    streamer = FirstToken()
    ids = torch.tensor([prompt_ids], device=pair.device)
    t0 = time.perf_counter()
    out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                               do_sample=False, eos_token_id=pair.eos_ids, pad_token_id=pair.eos_ids[0],
                               streamer=streamer)
    if pair.device.type == "cuda":
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    t_first = streamer.t_first or t1
    return out[0, len(prompt_ids):].tolist(), t_first - t0, t1 - t_first


def record_mismatch(record, tree, accepted: list[int], bonus: int) -> None:
    """Figure 1(b)'s parent-child mismatch of a drafted round (`graftlib.core.tree.parent_mismatch`) into its record:
    the decode loop's observer the bench attaches (`DecodeLoop.observers`)."""
    record.mismatch = parent_mismatch(tree.tokens, tree.parents, tree.depths, accepted[-1], bonus)


def decode_record(pair, run: Run, prompt: BenchPrompt, max_new_tokens: int, inputs: MethodInputs = SHIPPED_INPUTS,
                  sampling: Sampling = GREEDY, ar_tokens: list[int] | None = None, shared: dict | None = None) -> dict:
    """One decode's record; `ar_tokens` (greedy AR's for this prompt): the run's rounds walked along them
    (`methods.decoder.WalkedDecoder`), no wall clock (NaN times) and no exactness verdict (`walked`);
    `shared`: the walked continuation of this prompt, kept for the prompt's next walked runs (one per prompt)."""
    ids = list(prompt.input_ids)
    if run.method == "hf":
        require(sampling.greedy, "the hf baseline runs greedy only; drop it at --temperature > 0")
        tokens, prefill_s, decode_s = hf_generate(pair, ids, max_new_tokens)
        rounds = len(tokens) - 1
        return dict(tokens=tokens, new_tokens=len(tokens), prefill_s=prefill_s, decode_s=decode_s,
                    rounds=rounds, accepted_sum=rounds, nodes_sum=0,
                    stage_s={k: 0.0 for k in ("draft", "tree", "verify", "commit")})
    kind = WalkedDecoder if ar_tokens is not None else Decoder
    decoder = kind.for_method(pair.target, drafter_for(pair, run.method), run.method, run.budget or 1,
                              eos_ids=pair.eos_ids, inputs=inputs, sampling=prompt_sampling(sampling, prompt.uid),
                              pair=pair.identity() if run.method in FITTED_METHODS else None)
    decoder.observers.append(record_mismatch)
    if ar_tokens is None:
        res = decoder.decode(ids, max_new_tokens)
    else:
        key = (prompt.uid, max_new_tokens)
        shared = {} if shared is None else shared
        res = decoder.decode_along(ids, ar_tokens, max_new_tokens, continuation=shared.get(key))
        shared.clear()
        shared[key] = decoder.last_continuation
        res.prefill_s = res.decode_s = math.nan
    rounds = res.rounds
    n_rounds = len(rounds) if rounds else len(res.tokens) - 1
    rec = dict(
        tokens=res.tokens, new_tokens=len(res.tokens), prefill_s=res.prefill_s, decode_s=res.decode_s,
        rounds=n_rounds, accepted_sum=sum(r.accepted for r in rounds) if rounds else n_rounds,
        nodes_sum=sum(r.nodes for r in rounds),
        stage_s={k: sum(getattr(r, f"t_{k}") for r in rounds) for k in ("draft", "tree", "verify", "commit")},
        accepted=[r.accepted for r in rounds],
        ar_rounds=sum(r.budget == 0 for r in rounds),  # rounds an adaptive gate ran as plain AR steps
        declined_rounds=sum(r.budget == 0 and r.t_draft > 0 for r in rounds),  # ... of them after a draft
        # parent-child mismatch (graftlib.core.tree.parent_mismatch) over drafted rounds that could continue (d* < D)
        eligible_sum=sum(r.budget > 0 and r.last_depth < decoder.drafter.block_size - 1 for r in rounds),
        mismatch_sum=sum(r.mismatch for r in rounds),
        round_shapes=[RoundShape.of(r).to_list() for r in rounds],  # what prices the decode (lab.modeled)
    )
    if ar_tokens is not None:
        rec["walked"] = True
    policy = REGISTRY[run.method].policy
    if policy is not None:  # AR-drafted: the tree settings in the release's names (EAGLE's total_tokens, ...)
        rec["tree_setting"] = policy.settings(run.budget)
        # per round, the drafter forwards' seconds: the context step, then one per depth (lab.stages)
        rec["draft_step_s"] = [r.t_draft_steps or [] for r in rounds]
    return rec


def decode_prompt(pair, run: Run, prompt: BenchPrompt, max_new_tokens: int, inputs: MethodInputs = SHIPPED_INPUTS,
                  sampling: Sampling = GREEDY, ar_tokens: list[int] | None = None, shared: dict | None = None) -> dict:
    """`decode_record` over every turn of `prompt` (`graftlib.lab.report.multiturn`); a one-turn prompt's is its own
    (`ar_tokens`: walked along them, one-turn prompts only; `shared`: `decode_record`'s)."""
    if ar_tokens is not None:
        require(not prompt.user_turns, f"{prompt.uid}: a walked decode takes one turn (pass --turns 1)")
        return decode_record(pair, run, prompt, max_new_tokens, inputs, sampling, ar_tokens, shared)

    def decode(ids: tuple[int, ...], turn: int) -> dict:
        one = replace(prompt, uid=turn_uid(prompt.uid, turn), input_ids=ids, user_turns=())
        return decode_record(pair, run, one, max_new_tokens, inputs, sampling)

    return decode_turns(decode, pair.tokenizer, prompt.input_ids, prompt.user_turns)


def warm_key(run: Run) -> tuple[str, int]:
    """What one warm-up covers: a method and its tree-size bucket (the budget's next power of two), as a GPU
    compiles and caches per shape."""
    return run.method, 1 << max(0, (run.budget or 1) - 1).bit_length()


def warm_runs(pair, runs: list[Run], prompt: BenchPrompt, max_new_tokens: int, inputs: MethodInputs,
              sampling: Sampling) -> dict[tuple[str, int], dict]:
    """Warm each `warm_key` of `runs` on `prompt` until its seconds per token are stable (`core.timing.warm_up`);
    {warm key: what the warm-up did}, which every timed record of that key carries."""
    policy = WarmUp(new_tokens=min(WarmUp.new_tokens, max_new_tokens))
    warmed: dict[tuple[str, int], dict] = {}
    for r in runs:
        if warm_key(r) not in warmed:
            def one(r=r):
                rec = decode_prompt(pair, r, prompt, policy.new_tokens, inputs, sampling)
                return rec["decode_s"] / max(1, decoded_tokens(rec))
            warmed[warm_key(r)] = warm_up(one, policy)
    return warmed


def bench_setting(pair, prompts: list[BenchPrompt], runs: list[Run], max_new_tokens: int, inputs: MethodInputs,
                  extra: dict | None, sampling: Sampling, walk: bool) -> dict:
    """What a bench's records depend on (their `setting`, hashed into `setting_id`): the pair, the protocol, the
    methods' inputs, `extra`, the sampling, and whether the prompts have turns and the DFlash runs are walked."""
    eagle3 = pair.eagle3_describe() if any(r.method in AR_METHODS for r in runs) else None
    return dict(pair.describe(), max_new_tokens=max_new_tokens, ar_timing="bracketed",  # run_bench's protocol
                **inputs.setting([r.method for r in runs], eagle3=eagle3), **(extra or {}), **sampling.setting(),
                **({"turns": "all"} if any(p.user_turns for p in prompts) else {}), **({"walk": True} if walk else {}))


@dataclass(frozen=True)
class BenchSpec:
    """How a bench decodes and measures: `max_new_tokens` a prompt (a turn), at `sampling` (T = 0: greedy), each
    timed run after a `warmup` (`warm_runs`), or `walk`ed along the prompt's AR tokens (T = 0: modeled figures
    only); every record priced under `cost_profile` (None: `cost_profile.default_profile()`). `turns`: a
    multi-turn set's turns decoded, "all" (DDTree's protocol) or the first ("1"; `task_prompts`)."""

    max_new_tokens: int = 256
    sampling: Sampling = GREEDY
    warmup: bool = True
    walk: bool = False
    cost_profile: CostProfile | None = None
    turns: str = "all"


def run_bench(pair, prompts: list[BenchPrompt], runs: list[Run], out: Path, spec: BenchSpec,
              inputs: MethodInputs = SHIPPED_INPUTS, extra: dict | None = None, progress: bool = True) -> list[dict]:
    """Decode every prompt with every run (interleaved) as `spec` says, append records, return this setting's
    records. `inputs` (`MethodInputs`): the TDES scorer and beta of the `ddtree+tdes` and `graft` runs and the SABA
    calibration of the adaptive ones (None each: the shipped ones; `graftlib.inputs.artifacts`). Under torchrun
    (`graftlib.lab.run.shard`) this rank decodes its share of the prompts into its own file next to `out`;
    records already in `out` or in any rank file count as done, so shards merge on reading. At T > 0
    (`sampling`) every method decodes a prompt with the prompt's own seed (`prompt_sampling`); the
    setting records T, top-p and seed, and `matches_ar` is None (the law, not the tokens, is AR's).
    Every record is priced under `cost_profile` (default: `cost_profile.default_profile()`; module
    `graftlib.lab.report.modeled`), the returned ones too, records of earlier runs included. `walk` (T = 0): the
    DFlash-drafted runs are walked along the prompt's AR tokens (`graftlib.core.ar_path`: the rounds of
    the verified decode without its verify, for trees a CPU cannot verify in time); they have modeled
    figures only and no exactness verdict (`walked` in the record, `walk` in the setting); AR and the
    AR-drafted runs decode as ever."""
    from tqdm.auto import tqdm

    from graftlib.lab.run.shard import merged_records, rank_world, shard, shard_path

    max_new_tokens, sampling, walk, warmup = spec.max_new_tokens, spec.sampling, spec.walk, spec.warmup
    cost_profile = spec.cost_profile
    require(len(prompts) > 0, "no prompts to benchmark")
    setting = bench_setting(pair, prompts, runs, max_new_tokens, inputs, extra, sampling, walk)
    require(not walk or sampling.greedy, "--walk follows greedy AR's tokens: T = 0 only")
    require(walk or not hasattr(pair.drafter, "follow"), "a drafter-strength construction drafts along greedy AR's "
            "tokens: decode it walked (--walk); its figures are modeled, never timed")
    sid = setting_id(**setting)
    profile = cost_profile or default_profile()
    if any(r.method in AR_METHODS for r in runs):
        profile.require_ar_draft()  # refused before decoding, not after
    done = {(r["uid"], r["key"]): r for r in merged_records(out) if r.get("setting_id") == sid}
    rank, world = rank_world()
    write_to = shard_path(out, rank, world)
    ordered = sorted(runs, key=lambda r: r.method != "ar")  # per prompt, AR first (the reference tokens)
    todo = [(p, r) for p in shard(prompts, rank, world) for r in ordered if (p.uid, r.key) not in done]
    def walked(r: Run) -> bool:  # a DFlash-drafted run of a walked bench: modeled only, never timed
        return walk and r.method not in ("ar", "hf") and r.method not in AR_METHODS

    continuations: dict = {}  # the walked continuation of the prompt at hand (`decode_record`)
    timed = [r for r in ordered if not walked(r)]
    warmed = warm_runs(pair, timed, todo[0][0], max_new_tokens, inputs, sampling) if warmup and todo else {}
    reusable = reusable_ar(out, setting, sampling) if all(walked(r) or r.method == "ar" for r in runs) and walk else {}
    bar = tqdm(total=len(todo), desc="bench", unit="decode", disable=not progress)
    pending_ar = None  # this prompt's first AR decode, recorded once its second timing closes the block
    for i, (p, r) in enumerate(todo):
        bar.set_postfix_str(f"{p.uid} {r.key}")
        if r.method == "ar" and p.uid in reusable:  # nothing here is timed: another setting's AR decode serves
            done[(p.uid, "ar")] = rec = {**reusable[p.uid], "setting_id": sid, "setting": setting,
                                         "ar_from": reusable[p.uid]["setting_id"]}
            append_record(write_to, rec | price(rec, profile))
            bar.update()
            continue
        ar = done.get((p.uid, "ar"))
        rec = decode_prompt(pair, r, p, max_new_tokens, inputs, sampling, ar["tokens"] if walked(r) else None,
                            continuations)
        rec.update(
            setting_id=sid, key=r.key, method=r.method, budget=r.budget, task=p.task, uid=p.uid,
            prompt_tokens=len(p.input_ids), truncated_from=p.truncated_from, matches_ar=None,
            setting=setting, graftlib=__version__, host=platform.node(),
            warmup=warmed.get(warm_key(r), {"decodes": 0, "stable": False}),
        )
        if r.method != "ar" and ar is not None and sampling.greedy and not walked(r):
            rec.update(judge(pair.target, pair.tokenizer, p.input_ids, p.user_turns, rec, ar))
        rec.update(price(rec, profile))
        done[(p.uid, r.key)] = rec
        bar.update()
        if r.method == "ar":
            pending_ar = rec
        else:
            append_record(write_to, finish(rec))
        if pending_ar is not None and (i + 1 == len(todo) or todo[i + 1][0] is not p):  # block ends: AR again
            append_record(write_to, finish(bracket(pending_ar, decode_prompt(pair, Run("ar", None), p,
                                                                               max_new_tokens, sampling=sampling))))
            pending_ar = None
    bar.close()
    keys = {r.key for r in runs}
    uids = {p.uid for p in prompts}
    return reprice([rec for (uid, key), rec in done.items() if uid in uids and key in keys], profile)


AR_IDENTITY = ("target", "dtype", "device", "hardware", "max_new_tokens", "turns")  # what fixes AR's tokens


def reusable_ar(out: Path, setting: dict, sampling: Sampling) -> dict[str, dict]:
    """AR records of other settings in `out` whose tokens this setting's AR would decode again (same target,
    dtype, device, hardware, length, turns and sampling), by prompt: what a walked bench, in which nothing but
    AR would be timed, takes instead of decoding AR (`ar_from` names the setting it came from)."""
    from graftlib.lab.run.shard import merged_records

    same = (*AR_IDENTITY, *sampling.setting())
    found: dict[str, dict] = {}
    for rec in merged_records(out):
        other = rec.get("setting", {})
        if rec.get("key") == "ar" and rec.get("setting_id") != setting_id(**setting) and all(
                other.get(k) == setting.get(k) for k in same):
            found.setdefault(rec["uid"], rec)
    return found


def finish(rec: dict) -> dict:
    """Derived fields and the time stamp, set when a record is final (then it is appended)."""
    rec.update(mat=rec["accepted_sum"] / rec["rounds"] if rec["rounds"] else 1.0,
               tokens_per_s=decoded_tokens(rec) / rec["decode_s"] if rec["decode_s"] else None, time=time.time())
    return rec


def bracket(first: dict, second: dict) -> dict:
    """The AR record of a prompt from its two decodes (before and after the other runs); a multi-turn
    record's turns are bracketed the same way."""
    require(matches(second, first), "AR decoded the same prompt twice with different tokens "
            "(nondeterministic target?)")
    for a, b in zip([first, *first.get("turns", ())], [second, *second.get("turns", ())]):
        a["decode_s_runs"] = [a["decode_s"], b["decode_s"]]
        a["decode_s"] = (a["decode_s"] + b["decode_s"]) / 2
    return first


def bench_records(pair, tasks: list[str], runs: list[Run], n_prompts: int, out: Path, spec: BenchSpec,
                  inputs: MethodInputs = SHIPPED_INPUTS) -> list[dict]:
    """`run_bench` over several tasks (first `n_prompts` eval prompts each, `spec.turns` of them); every task's
    records."""
    records = []
    for task in tasks:
        prompts = task_prompts(pair, task, n_prompts, turns=spec.turns)
        records += run_bench(pair, prompts, runs, out, spec, inputs, extra={"task": task}, progress=False)
    return records


def load_prompts(pair, args) -> list[BenchPrompt]:
    """From --prompt / --prompts-file (raw user messages) or --task/--n-prompts/--split (graftlib.data.prompts)."""
    texts = list(args.prompt or [])
    if args.prompts_file:
        path = Path(args.prompts_file)
        require(path.is_file(), f"prompts file {path} does not exist")
        for line in path.read_text().splitlines():
            if line.strip():
                texts.append(json.loads(line)["text"] if line.lstrip().startswith("{") else line)
    if texts:
        for t in texts:
            require(t.strip() != "", "empty prompt in the prompt list")
        return [BenchPrompt("custom", f"custom-{i}", tuple(pair.prompt_ids(t))) for i, t in enumerate(texts)]
    return task_prompts(pair, args.task, args.n_prompts, args.split, args.max_prompt_tokens, args.turns)


def task_prompts(pair, task: str, n: int, split: str = "eval", max_prompt_tokens: int | None = None,
                 turns: str = "all") -> list[BenchPrompt]:
    """The first `n` items of a prompt set's split, chat-formatted for the pair's target; with
    `turns="all"` an item's later turns (MT-Bench's second) come along (`graftlib.lab.report.multiturn`)."""
    from graftlib.data import prompts

    out = []
    for it in prompts.load_items(task, split, n):
        p = prompts.format_prompt(it, pair.tokenizer, max_prompt_tokens)
        messages = user_turns(it.text, it.followups, turns)
        require(not (messages and p.truncated), f"{it.uid} was cut to --max-prompt-tokens {max_prompt_tokens}, "
                "so its later turns cannot follow it: raise --max-prompt-tokens or pass --turns 1")
        out.append(BenchPrompt(it.task, it.uid, tuple(p.input_ids), p.truncated_from, messages))
    return out


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark methods x budgets over prompts (interleaved, resumable)")
    add_model_args(p)
    add_ar_drafter_arg(p)
    add_method_args(p)
    add_sampling_args(p)
    p.add_argument("--methods", nargs="+", default=["ar", "dflash", "ddtree"],
                   help=f"from {', '.join(METHODS + BASELINES)} (ar is always included); "
                   "method@B runs that method at budget B only")
    p.add_argument("--budgets", nargs="+", type=int, default=[16, 32, 64], help="tree budgets")
    p.add_argument("--chain-budgets", nargs="+", type=int, default=[15], help="dflash drafts per round")
    p.add_argument("--caps", nargs="+", type=int, default=None,
                   help=f"largest budget of the adaptive methods ({', '.join(ADAPTIVE_METHODS)}); default: --budgets")
    p.add_argument("--prompt", action="append", help="a raw user message (repeatable)")
    p.add_argument("--prompts-file", help="text file, one prompt per line (or JSONL with a 'text' field)")
    p.add_argument("--task", default="gsm8k", help="prompt set when no --prompt/--prompts-file is given")
    p.add_argument("--split", default="eval")
    # not `--n` alone: torchrun's parser reads every prefix of its own options (--nnodes, --nproc-per-node)
    p.add_argument("--n-prompts", "--n", type=int, default=4,
                   help="number of prompts from --task (--n also works outside torchrun)")
    p.add_argument("--max-prompt-tokens", type=int, default=None)
    p.add_argument("--turns", choices=TURNS, default="all",
                   help="multi-turn sets (mt-bench): decode every user turn, each after the run's own answers "
                   "(DDTree's protocol; default), or the first only")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", default=None, help="JSONL results file (default results/bench.jsonl)")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--strength", default=None, metavar="FILE",
                   help="the DFlash drafter at the task's calibrated strength (a `graft calibrate-strength` file, e.g. "
                   "graftlib/assets/strength/paper-qwen3-8b.json): a construction, with --walk only (modeled figures)")
    p.add_argument("--shipped-costs", action="store_true",
                   help="price and decide with the shipped cost profile even where it was fitted on another machine or "
                   "pair (default: this machine's, measured once and cached; graftlib.lab.run.costs.machine_costs)")
    p.add_argument("--walk", action="store_true", help="T = 0: walk the DFlash-drafted runs' rounds along AR's tokens "
                   "instead of verifying (graftlib.core.ar_path): modeled figures only, for the paper's regime's large "
                   "trees (--cost-profile graftlib/assets/costs/paper-a100.json)")
    p.set_defaults(func=run)


def run(args) -> int:
    from graftlib.models.pair import load_pair

    require(args.n_prompts >= 1, f"--n-prompts must be >= 1, got {args.n_prompts}")
    runs = parse_runs(args.methods, args.budgets, args.chain_budgets, args.caps)
    profile = load_profile(args.cost_profile)  # a bad file fails before the models load
    if any(r.method in AR_METHODS for r in runs):
        profile.require_ar_draft()  # ... and so does one that cannot price the AR-drafted runs
    from graftlib.lab.run.shard import rank_device, rank_world, wait_for_records

    pair = load_pair(args.target, args.drafter, args.device or rank_device(), args.device_map, args.eagle3,
                     args.dtype)
    block = pair.drafter.block_size
    for r in runs:
        if r.method in CHAIN_METHODS and r.budget > block - 1:
            raise GraftError(f"{r.method} budget {r.budget} too large: at most block_size - 1 = {block - 1}")
    prompts = load_prompts(pair, args)
    extra = {}
    if args.strength:
        require(args.walk, "--strength drafts along greedy AR's tokens: pass --walk (its figures are modeled only)")
        pair = pair.with_strength(TaskStrengths(args.strength).of(args.task))
        extra = pair.drafter.strength.setting()
    out = Path(args.out) if args.out else results_dir() / "bench.jsonl"
    print(f"graft bench: {len(prompts)} prompts x {len(runs)} runs -> {out} "
          f"({pair.describe()}, drafter_trained={pair.drafter_trained})")
    inputs = method_inputs(args)
    if args.cost_profile is None and not args.shipped_costs:
        profile = machine_profile(pair)
        inputs = replace(inputs, saba=deciding(inputs.saba, profile))
        if any(r.method in AR_METHODS for r in runs):
            profile.require_ar_draft()
    print(f"graft bench: costs of {profile.name} ({profile.id}, {profile.hardware})")
    spec = BenchSpec(args.max_new_tokens, sampling_from_args(args), not args.no_warmup, args.walk, profile)
    records = run_bench(pair, prompts, runs, out, spec, inputs, extra=extra)
    rank, world = rank_world()
    if world > 1:  # a torchrun shard: rank 0 prints the sweep's one table once every rank's records are in
        if rank > 0:
            print(f"graft bench: rank {rank} of {world} done; rank 0 prints the merged table")
            return 0
        records = reprice(wait_for_records(out, records[0]["setting_id"],
                                           {(p.uid, r.key) for p in prompts for r in runs}), profile)
    rows = summarize(records)
    print(format_table(rows))
    print(format_validation(validate(records)))
    bad = [f"{r['key']} ({r['mismatches']})" for r in rows if r["mismatches"]]
    if bad:
        print(f"graft bench: decodes that left AR's tokens at no near-tie (mismatch, a bug): {', '.join(bad)}")
    return 1 if bad else 0
