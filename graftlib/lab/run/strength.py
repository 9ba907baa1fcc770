"""The drafter-strength construction calibrated per task to what is known of strong real DFlash drafters.

`graftlib.models.strength` moves the real drafter's marginals toward the target's along its own spine with
`Strength(s, tau, lam, kappa)`. Calibration, per task on its validation prompts (every decode walked along
greedy AR's tokens, modeled, never timed):
  - s and kappa (`fit_shape`): s by regula falsi so that the walked DFlash chain (15 drafts, the paper's block of
    16) accepts the paper's DFlash MAT for Qwen3-8B (Table 1), at every kappa tried; kappa likewise so
    that at the chain's first miss the true token is the drafter's rank-1 sibling as often as a real DFlash
    drafter's (`REAL_DFLASH`: 37%). Neither depends on lam or tau (both act past the first miss or on no top-1).
  - tau (`fit_temperature`): mean top-1 probability = top-1 accuracy over the chain's blocks.
  - lam (`fit_lam`), over DDTree@`PAPER_BUDGET`'s walked rounds, by the calibration's pin (`PINS`): after the
    greedy path took the rank-1 sibling, the next depth's top-1 right as often as a real drafter's (22%;
    `own-spine`), or DDTree's MAT at the paper's (`pinned`, with s, kappa, tau kept from `own-spine`; where lam = 1
    falls short, kappa lowered with s and tau refitted: `fit_kappa`).
Validation, on the eval prompts a bench reports (never fitted on): the chain's MAT; DDTree@`PAPER_BUDGET`'s MAT
beside the paper's DDTree MAT (a prediction); the spine's continuation against a real drafter's 65-84%; the
true token in the drafter's top-3 at the first miss against 58%; all beside the real embedded drafter's and,
given `--compare FILE`, an earlier construction's. `block_stats` counts every rate from the drafter's trace.
`calibrate_tasks` writes one small JSON (`graftlib/assets/strength/`) that the third regime reads;
`graft calibrate-strength` is the command.
"""

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.records import write_json_atomic
from graftlib.inputs.cli_args import add_model_args
from graftlib.lab.report.paper import TABLE1
from graftlib.lab.run.regimes import PAPER_TABLE2_BUDGET
from graftlib.methods.decoder import Decoder, WalkedDecoder
from graftlib.models.strength import OUT_OF_VOCAB, PAST_END, SCHEMA, Strength, StrengthDrafter, TaskStrengths

PAPER_MODEL = "Qwen3-8B"
PAPER_BUDGET = PAPER_TABLE2_BUDGET  # DDTree's budget for the prediction (its Table 2: 110 nodes a round)
TASKS = ("gsm8k", "math500", "mbpp", "humaneval", "swe-bench", "alpaca")  # Table 1's tasks shipped offline
# A real DFlash drafter inside a serving engine (the independent DDTree port rmagur1203/vllm-ddtree,
# docs/DDTREE-FINDINGS-EN.md, section 8; greedy, batch 1): at the first miss the true token is the rank-1 sibling
# 37% of the time and in the top-3 58%; after a sibling the next depth's top-1 is right 22%, on the spine 65-84%.
REAL_DFLASH = {"first_miss_rank1": 0.37, "first_miss_top3": 0.58, "sibling_continuation": 0.22,
               "spine_continuation": (0.65, 0.84)}
# What lam is fitted to: the public sibling continuation (the `own-spine` calibration), or the paper's DDTree MAT at
# `PAPER_BUDGET` (`pinned`: the paper's tree gain over its chain; the sibling rate is then a check, not a fit).
PINS = {"sibling": "the next depth's top-1 after a rank-1 sibling at a real DFlash drafter's rate",
        "tree": "DDTree's MAT at the paper's, Table 1 (Qwen3-8B)"}


@dataclass(frozen=True)
class StrengthFit:
    """A calibration's protocol: prompts fitted on (validation) and validated on (eval), each `max_new_tokens`
    long; `pin` (`PINS`); `shape_from`: a calibration whose s, kappa and tau a task keeps (they do not depend on
    lam, so a `tree` pin refits lam alone); `compare`: an earlier calibration validated beside it."""

    n_prompts: int = 10
    max_new_tokens: int = 128
    pin: str = "sibling"
    shape_from: TaskStrengths | None = None
    compare: TaskStrengths | None = None

    def __post_init__(self):
        require(self.pin in PINS, f"unknown strength pin {self.pin!r}: one of {', '.join(PINS)}")

    @property
    def key(self) -> str:
        shape = f"/shape-{self.shape_from.id}" if self.shape_from else ""
        return f"{self.n_prompts}x{self.max_new_tokens}/{self.pin}{shape}"


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


def walked_rounds(pair, strength: Strength, method: str, budget: int, w: Walked, draft_hook=None,
                  trace: list | None = None) -> list:
    """Every round of `method`@`budget` with the drafter at `strength`, walked over `w`'s prompts (`trace`: collects
    the drafter's blocks, `StrengthDrafter.trace`)."""
    out = []
    for i, (prompt, ar) in enumerate(zip(w.prompts, w.ar, strict=True)):
        drafter = StrengthDrafter(pair.drafter, strength)
        drafter.trace = trace
        dec = WalkedDecoder.for_method(pair.target, drafter, method, budget, eos_ids=pair.eos_ids)
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


def _rate(right: int, cases: int) -> dict:
    return {"rate": right / cases if cases else math.nan, "cases": cases}


def block_stats(trace: list) -> dict:
    """From a drafter's trace (`StrengthDrafter._record`): per block the first depth m whose top-1 is wrong (the
    first miss), where the true token sits there ("first_miss": the rank-1 sibling, in the top-3 (rank 1 or 2),
    in the draft vocabulary at all), and the next depth's top-1 right after a depth on the spine ("spine") and
    after the first miss when the true token was the rank-1 sibling ("sibling"). A block whose continuation ends
    before its first miss counts in none; a depth past the continuation ends the block's spine cases."""
    spine, sibling, ranks = [0, 0], [0, 0], []
    for _, right, rank in trace:
        right, rank = right.tolist(), rank.tolist()
        m = next((d for d, ok in enumerate(right) if not ok), None)
        for d in range(len(right) - 1 if m is None else m):
            if d + 1 < len(right) and rank[d + 1] != PAST_END:
                spine[0] += right[d + 1]
                spine[1] += 1
        if m is None or rank[m] == PAST_END:
            continue
        ranks.append(rank[m])
        if rank[m] == 1 and m + 1 < len(right) and rank[m + 1] != PAST_END:
            sibling[0] += right[m + 1]
            sibling[1] += 1
    n = len(ranks)
    first = {"rank1": sum(r == 1 for r in ranks) / n if n else math.nan,
             "top3": sum(r in (1, 2) for r in ranks) / n if n else math.nan,
             "in_vocab": sum(r != OUT_OF_VOCAB for r in ranks) / n if n else math.nan, "cases": n}
    return {"spine": _rate(*spine), "sibling": _rate(*sibling), "first_miss": first}


def run_stats(pair, strength: Strength, method: str, budget: int, w: Walked) -> dict:
    """`method`@`budget`'s walked MAT over `w` with the drafter's `block_stats`."""
    trace = []
    rounds = walked_rounds(pair, strength, method, budget, w, trace=trace)
    return {"mat": mat(rounds), **block_stats(trace)}


def _solve(at, goal: float, rising: bool, tol: float, steps: int) -> dict:
    """x in [0, 1] with at(x)["value"] = `goal`, `at` monotone (`rising` or falling; its rates are noisy counts):
    regula falsi inside the bracket, at most `steps` points past the two ends. Returns the closest point's at(x)
    and "x", with "bound" where an end already passes the goal."""
    sign = 1.0 if rising else -1.0
    hi = {"x": 1.0, **at(1.0)}  # first: a goal past x = 1 needs no other point
    if sign * (goal - hi["value"]) >= 0:
        return {**hi, "bound": "the goal lies past x = 1"}
    lo = {"x": 0.0, **at(0.0)}
    if sign * (goal - lo["value"]) <= 0:
        return {**lo, "bound": "the goal lies past x = 0"}
    best = min((lo, hi), key=lambda r: abs(r["value"] - goal))
    for _ in range(steps):
        x = lo["x"] + (goal - lo["value"]) * (hi["x"] - lo["x"]) / (hi["value"] - lo["value"])
        x = min(max(x, lo["x"] + 0.1 * (hi["x"] - lo["x"])), hi["x"] - 0.1 * (hi["x"] - lo["x"]))  # keep inside
        r = {"x": x, **at(x)}
        best = min((best, r), key=lambda b: abs(b["value"] - goal))
        if abs(r["value"] - goal) <= tol:
            break
        if sign * (r["value"] - goal) < 0:
            lo = r
        else:
            hi = r
    return best


def fit_strength(pair, w: Walked, target_mat: float, kappa: float = 0.0, tol: float = 0.01, steps: int = 8,
                 memo: dict | None = None) -> dict:
    """s such that the walked chain's MAT over `w` at `kappa` is `target_mat` within `tol` of it (`_solve`; MAT
    rises with s): {"s", "mat", "steps"}, and "bound" where even s = 0 or s = 1 cannot meet it. `memo`: the
    chain MATs of earlier fits on `w` (s = 0 and s = 1 are the same at every kappa)."""
    chain, runs, memo = chain_budget(pair), [], {} if memo is None else memo

    def at(s: float) -> dict:
        key = s if s in (0.0, 1.0) else (s, kappa)
        if key not in memo:
            runs.append(s)
            memo[key] = mat(walked_rounds(pair, Strength(s, kappa=kappa), "dflash", chain, w))
        return {"value": memo[key]}

    r = _solve(at, target_mat, rising=True, tol=tol * target_mat, steps=steps)
    bound = {"past x = 0": "the real drafter already accepts as much", "past x = 1": "even s = 1 accepts less"}
    return {"s": r["x"], "mat": r["value"], "steps": len(runs),
            **({"bound": next(v for k, v in bound.items() if k in r["bound"])} if "bound" in r else {})}


def fit_shape(pair, w: Walked, target_mat: float, rank1: float, tol: float = 0.03, steps: int = 3) -> dict:
    """(s, kappa): the chain's MAT at `target_mat` and its first miss's rank-1 sibling share at `rank1` (module
    doc): {"s", "kappa", "mat", "rank1", "fit"}, "bound" where no kappa in [0, 1] reaches `rank1`."""
    memo = {}

    def at(kappa: float) -> dict:
        fit = fit_strength(pair, w, target_mat, kappa, memo=memo)
        stats = run_stats(pair, Strength(fit["s"], kappa=kappa), "dflash", chain_budget(pair), w)
        return {"value": stats["first_miss"]["rank1"], "fit": fit, "chain": stats}

    r = _solve(at, rank1, rising=False, tol=tol, steps=steps)
    return {"s": r["fit"]["s"], "kappa": r["x"], "mat": r["fit"]["mat"], "rank1": r["value"], "fit": r["fit"],
            **({"bound": r["bound"]} if "bound" in r else {})}


def confidence(trace: list, tau: float) -> tuple[float, float]:
    """(mean top-1 probability at temperature `tau`, top-1 accuracy) over the depths of the traced blocks up to and
    including each block's first miss (the depths a chain reaches, which lam does not move)."""
    import torch

    reach = [int(r.logical_not().nonzero()[0]) + 1 if not bool(r.all()) else len(r) for _, r, _ in trace]
    top = torch.cat([t[:n] for (t, _, _), n in zip(trace, reach, strict=True)]).double()
    right = torch.cat([r[:n] for (_, r, _), n in zip(trace, reach, strict=True)]).double()
    sharp = top.pow(1.0 / tau)
    return float((sharp[:, 0] / sharp.sum(-1)).mean()), float(right.mean())


def fit_temperature(pair, strength: Strength, w: Walked, steps: int = 30) -> dict:
    """tau at which the drafter at `strength` is as confident as it is right over the chain's blocks on `w`
    (`confidence`: mean top-1 probability = top-1 accuracy; bisection on log tau), with the real drafter's two
    numbers. Neither lam nor tau moves a chain's rounds (`chain_strength`), so the fit walks the chain at lam = 1."""
    trace, real = [], []
    walked_rounds(pair, chain_strength(replace(strength, tau=1.0)), "dflash", chain_budget(pair), w, trace=trace)
    walked_rounds(pair, Strength(0.0), "dflash", chain_budget(pair), w, trace=real)
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


def fit_lam(pair, strength: Strength, w: Walked, goal: float, pin: str = "sibling", budget: int = PAPER_BUDGET,
            steps: int = 2) -> dict:
    """lam at which, over DDTree@`budget`'s walked rounds on `w` (`_solve`; both rise with lam), `PINS[pin]` holds:
    the next depth's top-1 right after a rank-1 sibling as often as `goal` ("sibling"), or the tree's MAT at `goal`
    ("tree", within 2%). {"lam", "sibling", "mat", "cases"}, "bound" where no lam in [0, 1] reaches it."""
    require(pin in PINS, f"unknown strength pin {pin!r}: one of {', '.join(PINS)}")

    def at(lam: float) -> dict:
        stats = run_stats(pair, replace(strength, lam=lam), "ddtree", budget, w)
        rate = stats["sibling"]["rate"]
        return {"value": stats["mat"] if pin == "tree" else rate, "sibling": rate, "mat": stats["mat"],
                "cases": stats["sibling"]["cases"]}

    r = _solve(at, goal, rising=True, tol=0.02 * goal if pin == "tree" else 0.03, steps=steps)
    return {"lam": r["x"], "sibling": r["sibling"], "mat": r["mat"], "cases": r["cases"],
            **({"bound": r["bound"]} if "bound" in r else {})}


def at_kappa(pair, w: Walked, kappa: float, chain_mat: float, memo: dict | None = None) -> tuple[Strength, float]:
    """The construction at `kappa` with lam = 1 whose chain accepts `chain_mat` over `w`: s refitted
    (`fit_strength`, `memo` its chain MATs) and tau to its confidence (`fit_temperature`); with the chain's MAT."""
    s = fit_strength(pair, w, chain_mat, kappa, memo=memo)
    return Strength(s["s"], fit_temperature(pair, Strength(s["s"], kappa=kappa), w)["tau"], 1.0, kappa), s["mat"]


def fit_kappa(pair, shape: Strength, w: Walked, goal: float, chain_mat: float, budget: int = PAPER_BUDGET,
              steps: int = 3) -> dict:
    """Where lam = 1 leaves the tree short of `goal` (the `tree` pin): kappa moved from `shape.kappa` down to 0
    (x = 1 - kappa / shape.kappa: the true token more often the first sibling at the first miss), lam = 1, s and
    tau refitted at each kappa so the chain still accepts `chain_mat` (`fit_strength`, `fit_temperature`), until
    DDTree@`budget`'s walked MAT over `w` meets `goal` within 2% (`_solve`; it rises as kappa falls). {"strength",
    "mat", "chain_mat", "kappa"}, "bound" where even kappa = 0 leaves it short."""
    memo = {}

    def at(x: float) -> dict:
        strength, chain = at_kappa(pair, w, shape.kappa * (1.0 - x), chain_mat, memo)
        return {"value": run_stats(pair, strength, "ddtree", budget, w)["mat"], "strength": strength,
                "chain_mat": chain}

    r = _solve(at, goal, rising=True, tol=0.02 * goal, steps=steps)
    return {"strength": r["strength"], "mat": r["value"], "chain_mat": r["chain_mat"], "kappa": r["strength"].kappa,
            **({"bound": r["bound"]} if "bound" in r else {})}


def tree_pinned(row: dict) -> bool:
    """A `tree`-pinned task's row is final: its DDTree MAT on the validation prompts within 5% of the paper's, or
    kappa already tried (`fit_kappa`), else a rerun fits kappa (rows of the `sibling` pin are always final)."""
    if row.get("pin") != "tree":
        return True
    return abs(row["ddtree_mat_val"] / row["paper_ddtree_mat"] - 1.0) <= 0.05 or "kappa" in row["fit"]


def chain_strength(strength: Strength) -> Strength:
    """The strength a chain is walked at: lam acts only past the first miss, where a chain accepts nothing, so the
    chain's rounds at lam = 1 are its rounds at any lam (tested), without the spine's target forwards."""
    return replace(strength, lam=1.0)


def _validation(pair, strength: Strength, ev: Walked) -> dict:
    """On the eval prompts: the chain's MAT, DDTree@`PAPER_BUDGET`'s MAT and its `block_stats`."""
    tree = run_stats(pair, strength, "ddtree", PAPER_BUDGET, ev)
    return {"chain_mat_eval": mat(walked_rounds(pair, chain_strength(strength), "dflash", chain_budget(pair), ev)),
            "ddtree_mat_eval": tree["mat"],
            "continuation": {"spine": tree["spine"], "sibling": tree["sibling"]}, "first_miss": tree["first_miss"]}


def _shape(pair, task: str, val: Walked, fit: StrengthFit, log) -> tuple[Strength, dict]:
    """s, kappa and tau of `task` (module doc), or `fit.shape_from`'s: (the strength at lam = 1, its fits)."""
    paper, t0 = TABLE1[PAPER_MODEL], time.time()
    if fit.shape_from is not None:
        kept = fit.shape_from.of(task)
        chain = mat(walked_rounds(pair, chain_strength(kept), "dflash", chain_budget(pair), val))
        return replace(kept, lam=1.0), {"shape": {"kept_from": fit.shape_from.describe(), "mat": chain}}
    shape = fit_shape(pair, val, paper["DFlash"][task][0], REAL_DFLASH["first_miss_rank1"])
    log(f"{task}: s {shape['s']:.3f}, kappa {shape['kappa']:.3f} ({time.time() - t0:.0f} s)")
    temp = fit_temperature(pair, Strength(shape["s"], kappa=shape["kappa"]), val)
    return Strength(shape["s"], temp["tau"], kappa=shape["kappa"]), {"shape": shape, "calibration": temp}


def calibrate_task(pair, task: str, fit: StrengthFit = StrengthFit(), log=print) -> dict:
    """One task's calibration (module doc): the fitted `Strength`, its fits and its validation beside the paper's,
    the public real drafter's, the real embedded drafter's and `fit.compare`'s (an earlier construction's)."""
    paper = TABLE1[PAPER_MODEL]
    require(task in paper["DFlash"], f"task {task!r} has no DFlash row in the paper's Table 1")
    t0 = time.time()
    split = fit_split(task, fit.n_prompts)
    val = walked_prompts(pair, task, split, fit.n_prompts, fit.max_new_tokens)
    shape, fits = _shape(pair, task, val, fit, log)
    goal = paper["DDTree"][task][0] if fit.pin == "tree" else REAL_DFLASH["sibling_continuation"]
    lam = fit_lam(pair, shape, val, goal, fit.pin, steps=4 if fit.pin == "tree" else 2)
    fitted, tree_val, chain_val, fits["kappa"] = replace(shape, lam=lam["lam"]), lam["mat"], fits["shape"]["mat"], None
    if fit.pin == "tree" and "bound" in lam and abs(lam["mat"] - goal) > 0.02 * goal and lam["mat"] < goal:
        log(f"{task}: lam = 1 leaves DDTree at {lam['mat']:.2f} of {goal:.2f}: fitting kappa "
            f"({time.time() - t0:.0f} s)")
        fits["kappa"] = fit_kappa(pair, shape, val, goal, paper["DFlash"][task][0])
        fitted, tree_val, chain_val = fits["kappa"]["strength"], fits["kappa"]["mat"], fits["kappa"]["chain_mat"]
    log(f"{task}: tau {fitted.tau:.3f}, lam {fitted.lam:.3f} ({time.time() - t0:.0f} s); validating on eval prompts")
    ev = walked_prompts(pair, task, "eval", fit.n_prompts, fit.max_new_tokens)
    calibrated, real = _validation(pair, fitted, ev), _validation(pair, Strength(0.0), ev)
    row = {"s": fitted.s, "tau": fitted.tau, "lam": fitted.lam, "kappa": fitted.kappa, "fitted_on": split,
           "pin": fit.pin, "fit": {"shape": fits["shape"], "lam": lam, **({"kappa": {
               k: v for k, v in fits["kappa"].items() if k != "strength"}} if fits["kappa"] else {})},
           "calibration": fits.get("calibration"),
           "paper_chain_mat": paper["DFlash"][task][0], "chain_mat_val": chain_val, "ddtree_mat_val": tree_val,
           "chain_mat_eval": calibrated["chain_mat_eval"], "real_chain_mat_eval": real["chain_mat_eval"],
           "ddtree_mat_eval": calibrated["ddtree_mat_eval"],
           "real_ddtree_mat_eval": real["ddtree_mat_eval"], "paper_ddtree_mat": paper["DDTree"][task][0],
           "continuation": {"real": real["continuation"], "calibrated": calibrated["continuation"]},
           "first_miss": {"real": real["first_miss"], "calibrated": calibrated["first_miss"]}}
    if fit.compare is not None:
        row["compared"] = {**asdict(fit.compare.of(task)), **_validation(pair, fit.compare.of(task), ev)}
    return {**row, "seconds": round(time.time() - t0, 1)}


def calibrate_tasks(pair, tasks=TASKS, fit: StrengthFit = StrengthFit(), out: Path | None = None, command: str = "",
                    log=print) -> dict:
    """`calibrate_task` per task, written to `out` after each task (a rerun keeps the tasks done)."""
    done = json.loads(Path(out).read_text()) if out and Path(out).is_file() else {}
    done = done.get("tasks", {}) if done.get("schema") == SCHEMA else {}
    table = {}
    for task in tasks:
        key = f"{task}/{fit.key}"
        if done.get(task, {}).get("key") == key and tree_pinned(done[task]):
            table[task] = done[task]
            continue
        table[task] = {"key": key, **calibrate_task(pair, task, fit, log)}
        log(format_row(task, table[task]))
        if out:
            write_json_atomic(out, document(pair, table, fit, command))
    return document(pair, table, fit, command)


def document(pair, table: dict, fit: StrengthFit, command: str) -> dict:
    return {"schema": SCHEMA, "construction": "graftlib.models.strength (mixture toward the target along the "
            "drafter's own spine)", "pair": pair.identity().to_dict(), "paper_model": PAPER_MODEL,
            "real_dflash": REAL_DFLASH, "pin": fit.pin, "lam_fitted_to": PINS[fit.pin], "fitted_on": "val",
            "validated_on": "eval", "prompts": fit.n_prompts, "max_new_tokens": fit.max_new_tokens,
            "paper_budget": PAPER_BUDGET, "command": command, "date": time.strftime("%Y-%m-%d"), "tasks": table}


def format_row(task: str, r: dict) -> str:
    c, f = r["continuation"], r["first_miss"]
    return (f"{task:<10} s={r['s']:.3f} kappa={r['kappa']:.3f} lam={r['lam']:.3f} tau={r['tau']:.3f}  chain MAT "
            f"val {r['chain_mat_val']:.2f} / eval {r['chain_mat_eval']:.2f} (paper {r['paper_chain_mat']:.2f})  "
            f"DDTree@{PAPER_BUDGET} MAT {r['ddtree_mat_eval']:.2f} (paper {r['paper_ddtree_mat']:.2f}; real "
            f"{r['real_ddtree_mat_eval']:.2f})  next top-1 after sibling / spine "
            f"{c['calibrated']['sibling']['rate']:.2f}"
            f" / {c['calibrated']['spine']['rate']:.2f} (real {c['real']['sibling']['rate']:.2f} / "
            f"{c['real']['spine']['rate']:.2f})  first miss rank-1 / top-3 {f['calibrated']['rank1']:.2f} / "
            f"{f['calibrated']['top3']:.2f} (real {f['real']['rank1']:.2f} / {f['real']['top3']:.2f})")


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate-strength", help="the drafter strength per task that gives the paper's DFlash "
                       "chain MAT, validated on DDTree's MAT and the sibling / spine continuation rates")
    add_model_args(p)
    p.add_argument("--tasks", nargs="+", default=list(TASKS))
    p.add_argument("--n-prompts", type=int, default=10, help="validation prompts fitted on, eval prompts validated on")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", default="results/strength.json", help="the strength file (resumable by task)")
    p.add_argument("--compare", default=None, metavar="NAME|FILE", help="an earlier drafter-strength calibration "
                   "whose construction is validated beside the new one on the same eval prompts")
    p.add_argument("--pin", default="sibling", choices=list(PINS), help="what lam is fitted to: the public sibling "
                   "continuation (own-spine) or the paper's DDTree MAT (pinned)")
    p.add_argument("--shape-from", default=None, metavar="NAME|FILE", help="keep each task's s, kappa and tau from "
                   "this calibration (they do not depend on lam) and fit lam alone")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from graftlib.models.pair import load_pair

    pair = load_pair(args.target, args.drafter, args.device, args.device_map, dtype=args.dtype)
    given = sys.argv[1:2] == ["calibrate-strength"]
    command = "graft " + " ".join(sys.argv[1:]) if given else "graft calibrate-strength"
    fit = StrengthFit(args.n_prompts, args.max_new_tokens, args.pin,
                      TaskStrengths(args.shape_from) if args.shape_from else None,
                      TaskStrengths(args.compare) if args.compare else None)
    calibrate_tasks(pair, args.tasks, fit, Path(args.out), command)
    print(f"written to {args.out}")
    return 0
