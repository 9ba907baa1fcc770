"""The drafter-strength axis: one strength per task calibrated to the paper's DFlash chain, and its validation.

`graftlib.models.strength` moves the real drafter's marginals toward the target's with one number,
s. Calibration, per task on its validation prompts: s by bisection so that the walked DFlash chain (15
drafts a round, the paper's block of 16) accepts the paper's DFlash MAT for Qwen3-8B (Table 1)
(`fit_strength`; MAT grows with s, s = 0 the real drafter, s = 1 the whole block), then the
temperature tau at which the drafter's mean top-1 probability equals its top-1 accuracy over the
chain's blocks (`fit_temperature`; a trained drafter's calibration, which tau restores after the
mixture flattened it; tau moves no top-1, so the chain's MAT stays the fitted one).
Validation, on the eval prompts a bench reports (never the ones fitted on):
  - the chain's MAT there beside the paper's (a fit on other prompts of the task);
  - DDTree's MAT at the paper's budget (`PAPER_BUDGET`, the paper regime's Table 2 budget) beside the
    paper's DDTree MAT: a prediction, not a fit;
  - `continuation_rates`: how often the next depth's top-1 is the greedy token after the greedy path
    took the drafter's rank-1 sibling at a depth, against after it stayed on the drafter's spine
    (top-1 at every depth so far), for the real and the calibrated drafter. A real DFlash drafter
    continues a sibling far worse than its spine (its next marginal follows its own spine); the
    construction's mixture follows the true path, so its sibling rate says how far it removes the
    parent-child mismatch that TDES scores.
Every decode here is walked along greedy AR's tokens (modeled, never timed). `calibrate_tasks` writes
the strengths with their validation as one small JSON (`graftlib/assets/strength/`), which the
workbook's third regime reads; `graft calibrate-strength` is the command.
"""

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.records import write_json_atomic
from graftlib.inputs.cli_args import add_model_args
from graftlib.lab.report.paper import TABLE1
from graftlib.methods.decoder import Decoder, WalkedDecoder
from graftlib.models.strength import SCHEMA, StrengthDrafter

PAPER_MODEL = "Qwen3-8B"
PAPER_BUDGET = 128  # DDTree's budget for the prediction (the paper regime's Table 2 budget; its Table 2: 110 nodes)
TASKS = ("gsm8k", "math500", "mbpp", "humaneval", "swe-bench", "alpaca")  # Table 1's tasks shipped offline


@dataclass
class Walked:
    """Prompts with greedy AR's tokens, for walked decodes."""

    task: str
    prompts: list[list[int]]
    ar: list[list[int]]
    max_new_tokens: int
    continuations: dict = field(default_factory=dict)  # prompt index -> its walked continuation, made once


def fit_split(task: str, n: int) -> str:
    """Where a task's strength is fitted: its validation split, or for a set without one (HumanEval) the last `n`
    eval prompts, which a bench of the first 128 never reads ("eval-tail")."""
    from graftlib.data.prompts import load_items

    return "val" if len(load_items(task, "val", n)) >= n else "eval-tail"


def walked_prompts(pair, task: str, split: str, n: int, max_new_tokens: int) -> Walked:
    """The first `n` prompts of a task's split (`eval-tail`: the last `n` eval ones) with their greedy AR tokens
    (one AR decode each)."""
    from graftlib.data.prompts import format_prompt, load_items

    items = load_items(task, "eval", 10**6)[-n:] if split == "eval-tail" else load_items(task, split, n)
    require(len(items) == n, f"{task} has {len(items)} {split} prompts, not the {n} asked for")
    prompts = [list(format_prompt(it, pair.tokenizer).input_ids) for it in items]
    ar = Decoder.for_method(pair.target, None, "ar", eos_ids=pair.eos_ids)
    return Walked(task, prompts, [ar.decode(p, max_new_tokens).tokens for p in prompts], max_new_tokens)


def walked_rounds(pair, s: float, method: str, budget: int, w: Walked, draft_hook=None, tau: float = 1.0,
                  trace: list | None = None) -> list:
    """Every round of `method`@`budget` with the drafter at strength `s` and temperature `tau`, walked over `w`'s
    prompts (`trace`: collects the drafter's blocks, `StrengthDrafter.trace`)."""
    out = []
    for i, (prompt, ar) in enumerate(zip(w.prompts, w.ar, strict=True)):
        drafter = StrengthDrafter(pair.drafter, s, tau)
        drafter.trace = trace
        dec = WalkedDecoder.for_method(pair.target, drafter, method, budget, pair.eos_ids)
        if draft_hook is not None:
            dec.draft = draft_hook(dec.draft)
        out += dec.decode_along(prompt, ar, w.max_new_tokens, continuation=w.continuations.get(i)).rounds
        w.continuations[i] = dec.last_continuation
    return out


def mat(rounds) -> float:
    """Accepted tokens per round, the bonus token included, pooled over the rounds."""
    return sum(r.accepted for r in rounds) / len(rounds) if rounds else math.nan


def chain_budget(pair) -> int:
    return pair.drafter.block_size - 1


def fit_strength(pair, w: Walked, target_mat: float, tol: float = 0.01, steps: int = 14) -> dict:
    """s such that the walked chain's MAT over `w` is `target_mat` (bisection; module doc): {"s", "mat",
    "steps"}, and "bound" where even s = 0 or s = 1 cannot meet it."""
    chain = chain_budget(pair)

    def at(s: float) -> float:
        return mat(walked_rounds(pair, s, "dflash", chain, w))

    lo, hi = 0.0, 1.0
    m_lo, m_hi = at(lo), at(hi)
    if target_mat <= m_lo:
        return {"s": 0.0, "mat": m_lo, "steps": 2, "bound": "the real drafter already accepts as much"}
    if target_mat >= m_hi:
        return {"s": 1.0, "mat": m_hi, "steps": 2, "bound": "even s = 1 accepts less"}
    s, m = lo, m_lo
    for step in range(steps):
        s = (lo + hi) / 2
        m = at(s)
        if abs(m - target_mat) <= tol * target_mat:
            return {"s": s, "mat": m, "steps": step + 3}
        lo, hi = (s, hi) if m < target_mat else (lo, s)
    return {"s": s, "mat": m, "steps": steps + 2}


def confidence(trace: list, tau: float) -> tuple[float, float]:
    """(mean top-1 probability at temperature `tau`, top-1 accuracy) over every depth of the traced blocks."""
    import torch

    top = torch.cat([t for t, _ in trace]).double()
    right = torch.cat([r for _, r in trace]).double()
    sharp = top.pow(1.0 / tau)
    return float((sharp[:, 0] / sharp.sum(-1)).mean()), float(right.mean())


def fit_temperature(pair, s: float, w: Walked, steps: int = 30) -> dict:
    """tau at which the drafter at strength `s` is as confident as it is right over the chain's blocks on `w`
    (mean top-1 probability = top-1 accuracy; bisection on log tau), with the real drafter's two numbers."""
    trace, real = [], []
    walked_rounds(pair, s, "dflash", chain_budget(pair), w, trace=trace)
    walked_rounds(pair, 0.0, "dflash", chain_budget(pair), w, trace=real)
    lo, hi = math.log(0.02), math.log(5.0)
    for _ in range(steps):
        mid = (lo + hi) / 2
        conf, acc = confidence(trace, math.exp(mid))
        lo, hi = (mid, hi) if conf > acc else (lo, mid)  # a larger tau flattens: less confident
    tau = math.exp((lo + hi) / 2)
    conf, acc = confidence(trace, tau)
    raw, _ = confidence(trace, 1.0)
    real_conf, real_acc = confidence(real, 1.0)
    return {"tau": tau, "confidence": conf, "accuracy": acc, "confidence_at_tau_1": raw,
            "real_confidence": real_conf, "real_accuracy": real_acc}


def continuation_rates(pair, s: float, w: Walked, budget: int = PAPER_BUDGET, tau: float = 1.0) -> dict:
    """The next depth's top-1 right after the greedy path took the drafter's rank-1 sibling at a depth (its
    earlier depths on the spine) against after the spine (module doc), over DDTree@`budget`'s walked rounds."""
    drafts = []

    def hook(draft):
        def wrapped(st, k):
            cand = draft(st, k)
            drafts.append((st.start, cand.id_table[:, :2].copy()))
            return cand
        return wrapped

    counts = {"spine": [0, 0], "sibling": [0, 0]}  # [next top-1 right, cases]
    for i, (prompt, ar) in enumerate(zip(w.prompts, w.ar, strict=True)):
        drafts.clear()
        one = Walked(w.task, [prompt], [ar], w.max_new_tokens, {0: w.continuations[i]} if i in w.continuations else {})
        walked_rounds(pair, s, "ddtree", budget, one, hook, tau)
        w.continuations[i] = one.continuations[0]
        n = len(prompt)
        for start, top2 in drafts:
            truth = [ar[start + d - n] if start + d - n < len(ar) else -1 for d in range(1, top2.shape[0] + 1)]
            for d in range(top2.shape[0] - 1):  # depth d + 1 of the block (index d), then the next one
                if truth[d] < 0 or truth[d + 1] < 0:
                    break
                spine = top2[d, 0] == truth[d]
                if not spine and top2[d, 1] != truth[d]:
                    break  # the greedy path left the top-2: neither case beyond it
                case = counts["spine" if spine else "sibling"]
                case[0] += int(top2[d + 1, 0] == truth[d + 1])
                case[1] += 1
                if not spine:
                    break  # one deviation a round: the case is the first step after it
    return {k: (right / cases if cases else math.nan, cases) for k, (right, cases) in counts.items()}


def calibrate_tasks(pair, tasks=TASKS, n_prompts: int = 10, max_new_tokens: int = 128, out: Path | None = None,
                    command: str = "", log=print) -> dict:
    """Per task: s fitted on `n_prompts` validation prompts, then on as many eval prompts the chain's MAT, DDTree's
    at `PAPER_BUDGET` and the continuation rates of the real and the calibrated drafter, beside the paper's; written
    to `out` after each task (a rerun keeps the tasks done)."""
    paper = TABLE1[PAPER_MODEL]
    done = json.loads(Path(out).read_text())["tasks"] if out and Path(out).is_file() else {}
    table = {}
    for task in tasks:
        require(task in paper["DFlash"], f"task {task!r} has no DFlash row in the paper's Table 1")
        key = f"{task}/{n_prompts}x{max_new_tokens}"
        if done.get(task, {}).get("key") == key:
            table[task] = done[task]
            continue
        t0 = time.time()
        split = fit_split(task, n_prompts)
        val = walked_prompts(pair, task, split, n_prompts, max_new_tokens)
        fit = fit_strength(pair, val, paper["DFlash"][task][0])
        temp = fit_temperature(pair, fit["s"], val)
        s, tau = fit["s"], temp["tau"]
        ev = walked_prompts(pair, task, "eval", n_prompts, max_new_tokens)
        rates = {"real": continuation_rates(pair, 0.0, ev), "calibrated": continuation_rates(pair, s, ev, tau=tau)}
        table[task] = {
            "key": key, "s": s, "tau": tau, "fitted_on": split, "fit_steps": fit["steps"], "calibration": temp,
            **({"bound": fit["bound"]} if "bound" in fit else {}),
            "paper_chain_mat": paper["DFlash"][task][0], "chain_mat_val": fit["mat"],
            "chain_mat_eval": mat(walked_rounds(pair, s, "dflash", chain_budget(pair), ev, tau=tau)),
            "real_chain_mat_eval": mat(walked_rounds(pair, 0.0, "dflash", chain_budget(pair), ev)),
            "ddtree_mat_eval": mat(walked_rounds(pair, s, "ddtree", PAPER_BUDGET, ev, tau=tau)),
            "ddtree_mat_eval_tau_1": mat(walked_rounds(pair, s, "ddtree", PAPER_BUDGET, ev)),
            "real_ddtree_mat_eval": mat(walked_rounds(pair, 0.0, "ddtree", PAPER_BUDGET, ev)),
            "paper_ddtree_mat": paper["DDTree"][task][0],
            "continuation": {who: {case: {"rate": r, "cases": c} for case, (r, c) in v.items()}
                             for who, v in rates.items()},
            "seconds": round(time.time() - t0, 1)}
        log(format_row(task, table[task]))
        if out:
            write_json_atomic(out, document(pair, table, n_prompts, max_new_tokens, command))
    return document(pair, table, n_prompts, max_new_tokens, command)


def document(pair, table: dict, n_prompts: int, max_new_tokens: int, command: str) -> dict:
    return {"schema": SCHEMA, "construction": "graftlib.models.strength (mixture toward the target's marginal)",
            "pair": pair.identity().to_dict(), "paper_model": PAPER_MODEL, "fitted_on": "val", "validated_on": "eval",
            "prompts": n_prompts, "max_new_tokens": max_new_tokens, "paper_budget": PAPER_BUDGET,
            "command": command, "date": time.strftime("%Y-%m-%d"), "tasks": table}


def format_row(task: str, r: dict) -> str:
    c = r["continuation"]
    return (f"{task:<10} s={r['s']:.3f} tau={r['tau']:.3f}  chain MAT val {r['chain_mat_val']:.2f} / eval {r['chain_mat_eval']:.2f} "
            f"(paper {r['paper_chain_mat']:.2f}; real {r['real_chain_mat_eval']:.2f})  DDTree@{PAPER_BUDGET} MAT "
            f"{r['ddtree_mat_eval']:.2f} (tau 1: {r['ddtree_mat_eval_tau_1']:.2f}; paper {r['paper_ddtree_mat']:.2f}; real "
            f"{r['real_ddtree_mat_eval']:.2f})  "
            f"next top-1 after sibling / spine: real {c['real']['sibling']['rate']:.2f} / {c['real']['spine']['rate']:.2f}, "
            f"calibrated {c['calibrated']['sibling']['rate']:.2f} / {c['calibrated']['spine']['rate']:.2f}")


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate-strength", help="the drafter strength per task that gives the paper's DFlash "
                       "chain MAT, validated on DDTree's MAT and the sibling / spine continuation rates")
    add_model_args(p)
    p.add_argument("--tasks", nargs="+", default=list(TASKS))
    p.add_argument("--n-prompts", type=int, default=10, help="validation prompts fitted on, eval prompts validated on")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", default="results/strength.json", help="the strength file (resumable by task)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from graftlib.models.pair import load_pair

    pair = load_pair(args.target, args.drafter, args.device, args.device_map, dtype=args.dtype)
    command = "graft " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["calibrate-strength"] else "graft calibrate-strength"
    calibrate_tasks(pair, args.tasks, args.n_prompts, args.max_new_tokens, Path(args.out), command)
    print(f"written to {args.out}")
    return 0
