"""`graft device-check` (`experiments/device-check.sh`): one prepared run of the figures a device must show.

Sections, in this order; each is timed, its warnings kept, its errors recorded (never fatal), and one that
would start after the time budget (`minutes`) is skipped:
  exactness  every registry method against greedy AR in the run's dtype, on tiny random pairs and (unless
             `tiny`) the embedded pair; a mismatch that is not a certified tie fails the check;
  costs      the verify cost curve for 1..512 tokens; host: the host overhead and syncs per round;
  prepare    `graft prepare` on the pair (`graftlib.training.prepare`): its scorer, calibration and the
             device's cost profile with its AR drafter forward cost;
  bench      ar / dflash / ddtree@16,64 / graft / opt-tree@8 on GSM8K (10 x 128), wall clock and modeled,
             last so that graft runs with this device's own calibration.
With `tiny` the pair is a tiny random Qwen3 target and a z-lab-layout drafter loaded by path.

Output (`out`): device-check.json (settings, hardware, every section's status, seconds, warnings,
result or error; rewritten after each section, so an interrupted run keeps what it finished),
bench.jsonl, artifacts/, cost-profile.json (`device_profile`: the verify curve after warm-up, the
draft step, host time and AR drafter forwards; what the bench prices rounds with) and
cost-profile-saba.json (the calibration's own fit); the table is printed.

Details: docs/internals.md, `graftlib.lab.run.device_check`.
"""

import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from graftlib.core.errors import require
from graftlib.core.exactness import VERDICTS, verdict
from graftlib.core.hardware import hardware_id
from graftlib.core.paths import portable, results_dir
from graftlib.core.records import write_json_atomic
from graftlib.core.version import __version__
from graftlib.inputs.artifacts import ArtifactDir, artifact_inputs
from graftlib.inputs.cost_profile import CostProfile, from_curve, from_saba, with_ar_draft
from graftlib.lab.report.metrics import format_table, summarize
from graftlib.lab.run.bench import BenchSpec, Run, run_bench, task_prompts
from graftlib.lab.run.costs.cost_curves import ar_draft_cost_curve, fit_ar_draft, verify_cost_curve
from graftlib.lab.run.costs.host_overhead import format_host_table, host_overhead_table
from graftlib.methods.decoder import Decoder, drafter_for
from graftlib.methods.fitted import slug
from graftlib.methods.registry import AR_METHODS, SELECTOR_METHODS, MethodInputs
from graftlib.methods.saba_params import SabaParams
from graftlib.models.target import DTYPES
from graftlib.models.tiny import (
    ARCH_SEEDS,
    exactness_dflash2,
    exactness_eagle3,
    exactness_pair,
    exactness_prompts,
    write_drafter_dir,
    write_target_dir,
)
from graftlib.training.prepare import QUICK, PrepareConfig, prepare

SCHEMA = "graft-device-check/1"
SECTIONS = ("exactness", "costs", "host", "prepare", "bench")


@dataclass
class CheckConfig:
    device: str = "cuda"
    dtype: str | None = None  # float32 / bfloat16 / float16; None: the device's (bfloat16 on CUDA)
    tiny: bool = False  # the tiny random Qwen3 pair instead of the embedded one
    minutes: float = 8.0  # no section starts after this
    sections: tuple[str, ...] = SECTIONS  # the sections to run, in SECTIONS' order
    run_prepare: bool | None = None  # None: on a GPU and for the tiny pair
    exact_prompts: int = 2  # embedded pair: gsm8k eval prompts (the bench adds 10 prompts' verdicts)
    exact_tokens: int = 96
    tiny_tokens: int = 37
    costs_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
    costs_prefix: int = 256
    costs_repeats: int = 5
    host_budgets: tuple[int, ...] = (8, 32, 64, 256)
    host_rounds: int = 48
    host_repeats: int = 3
    bench_prompts: int = 10
    bench_tokens: int = 128
    bench_budgets: tuple[int, ...] = (16, 64)  # ddtree
    graft_cap: int = 64
    ar_tree_runs: tuple[tuple[str, int], ...] = (("opt-tree", 8),)  # AR-drafted runs (the pair's EAGLE-3 drafter)
    ar_widths: tuple[int, ...] = (1, 5, 10, 25, 50)  # AR drafter forward cost: frontier widths, context rows
    ar_contexts: tuple[int, ...] = (1, 4, 9)
    prompt_tokens: int | None = None  # cut longer prompts (the tiny pair's context is 512)
    # sized to an H200's 2026-12-04 run (traces ~5.5 s a prompt, calibration ~35 s a validation prompt)
    prepare: PrepareConfig = field(default_factory=lambda: PrepareConfig(trace_prompts=48, trace_minutes=1.0,
                                                                          val_prompts=3))


def quick(cfg: CheckConfig) -> CheckConfig:
    """The small variant: a couple of prompts, fewer tokens, sizes and repeats, QUICK prepare."""
    return replace(cfg, exact_prompts=2, exact_tokens=48, tiny_tokens=24,
                   costs_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                   costs_repeats=2, host_budgets=(8, 64), host_rounds=16, host_repeats=1, bench_prompts=2,
                   bench_tokens=48, ar_widths=(1, 10), ar_contexts=(1, 4), minutes=min(cfg.minutes, 3.0),
                   prepare=QUICK)


def tiny(cfg: CheckConfig) -> CheckConfig:
    """The tiny pair at the smallest sizes (the CPU test): every section in seconds."""
    return replace(cfg, tiny=True, tiny_tokens=16, costs_sizes=(1, 2, 4, 8, 16, 32, 64), costs_prefix=32,
                   costs_repeats=1, host_budgets=(8, 64), host_rounds=4, host_repeats=1, bench_prompts=1,
                   bench_tokens=16, bench_budgets=(8,), graft_cap=16, ar_tree_runs=(), ar_widths=(1, 4),
                   ar_contexts=(1,), prompt_tokens=96,
                   prepare=replace(QUICK, trace_prompts=2, trace_tokens=16, shard_size=2, val_prompts=2,
                                   calib_tokens=16,
                                   max_prompt_tokens=96, grid=(1, 2, 4)))


class Skipped(Exception):
    """A section that has nothing to do here (its reason is recorded)."""


# ----------------------------------------------------------------------------- sections


def exactness_row(label: str, decoder, target, prompts: list[list[int]], refs: list[list[int]], n: int) -> dict:
    """One run's decodes of `prompts` against the AR references: counts of each verdict, the largest
    gap of a tie and the first mismatch."""
    row = {"model": label, "exact": 0, "tie": 0, "mismatch": 0, "max_gap": 0.0, "first_mismatch": None}
    for ids, ref in zip(prompts, refs):
        v = verdict(target, ids, ref, decoder.decode(ids, n).tokens)
        row[v.kind] += 1
        if v.kind == "tie":
            row["max_gap"] = max(row["max_gap"], v.divergence.top2_gap)
        if v.kind == "mismatch" and row["first_mismatch"] is None:
            row["first_mismatch"] = v.to_dict()["divergence"]
    return row


@dataclass
class CheckedPair:
    """A target and its drafters as the exactness section checks them, named `label` in its rows: `drafters`
    {"dflash": the DFlash drafter, "eagle3": the EAGLE-3 drafter of the AR-drafted methods, "dflash2": a DFlash 2
    drafter for the selector methods}; `pair_id` checks the methods' artifacts against it, `saba` the calibration
    (None: the shipped one)."""

    label: str
    target: object
    drafters: dict
    eos_ids: list[int] | None = None
    pair_id: object = None
    saba: SabaParams | None = None


def exactness_of(checked: CheckedPair, prompts, runs, n: int) -> list[dict]:
    """Rows of `exactness_row` for every (method, budget) in `runs` on one model pair."""
    target, eos_ids = checked.target, checked.eos_ids
    ar = Decoder.for_method(target, None, "ar", eos_ids=eos_ids)
    refs = [ar.decode(ids, n).tokens for ids in prompts]
    rows = []
    for method, budget in runs:
        kind = "eagle3" if method in AR_METHODS else "dflash2" if method in SELECTOR_METHODS else "dflash"
        dec = Decoder.for_method(target, checked.drafters[kind], method, budget, eos_ids=eos_ids,
                                 pair=checked.pair_id, inputs=MethodInputs(saba=checked.saba))
        rows.append({"run": f"{method}@{budget}", **exactness_row(checked.label, dec, target, prompts, refs, n)})
    return rows


TINY_RUNS = [("dflash", 3), ("ddtree", 1), ("ddtree", 8), ("ddtree", 64), ("ddtree+saba", 16), ("caddtree", 16),
             ("eagle3", 59), ("opt-tree", 8), ("dflash2", 7), ("ddtree+sel", 8)]
EMBEDDED_RUNS = [("dflash", 15), ("ddtree", 8), ("ddtree", 64), ("ddtree+tdes", 32), ("ddtree+saba", 64),
                 ("graft", 64), ("caddtree", 64), ("eagle3", 59), ("opt-tree", 8)]  # the shipped scorer and calibration


def exactness_section(cfg: CheckConfig, pair) -> dict:
    rows = []
    for arch in ARCH_SEEDS:
        target, drafter = exactness_pair(arch)
        eagle3, dflash2 = exactness_eagle3(target, arch), exactness_dflash2(arch)
        target, drafter, eagle3, dflash2 = (m.to(cfg.device, pair.target.dtype) for m in (target, drafter, eagle3,
                                                                                          dflash2))
        tiny = CheckedPair(f"tiny-{arch}", target, {"dflash": drafter, "eagle3": eagle3, "dflash2": dflash2},
                           saba=SabaParams())  # the builtin calibration: no pair to check
        rows += exactness_of(tiny, exactness_prompts(arch), TINY_RUNS, cfg.tiny_tokens)
    if not cfg.tiny:
        prompts = [list(p.input_ids) for p in task_prompts(pair, "gsm8k", cfg.exact_prompts)]
        checked = CheckedPair(pair.target_name, pair.target, {"dflash": pair.drafter, "eagle3": pair.eagle3_drafter()},
                              pair.eos_ids, pair.identity())
        rows += exactness_of(checked, prompts, EMBEDDED_RUNS, cfg.exact_tokens)
    total = {k: sum(r[k] for r in rows) for k in VERDICTS}
    return {"dtype": str(pair.target.dtype).removeprefix("torch."), "rows": rows, **total,
            "passed": total["mismatch"] == 0}


def costs_section(cfg: CheckConfig, pair) -> dict:
    curve = verify_cost_curve(pair.target, list(cfg.costs_sizes), cfg.costs_prefix, cfg.costs_repeats)
    return {"prefix_len": cfg.costs_prefix, "repeats": cfg.costs_repeats,
            "verify_ms": {n: 1000 * t for n, t in curve.items()},
            "x_one_token": {n: t / curve[min(curve)] for n, t in curve.items()}}


def host_section(cfg: CheckConfig, pair) -> dict:
    """`graftlib.lab.run.costs.host_overhead`: host time per round by stage and device syncs per round, on a tiny
    random pair on this device (the forwards nearly free), DDTree / +TDES / GRAFT at B = 8, 32, 64, 256
    (`host_budgets`; 8 and 64 in a quick run)."""
    table = host_overhead_table(cfg.device, budgets=cfg.host_budgets, rounds=cfg.host_rounds, repeats=cfg.host_repeats)
    print(format_host_table(table), flush=True)
    return {"table": table}


def prepare_section(cfg: CheckConfig, pair, out: Path) -> dict:
    wanted = cfg.run_prepare if cfg.run_prepare is not None else (cfg.tiny or cfg.device.startswith("cuda"))
    if not wanted:
        raise Skipped("prepare runs on a GPU or for the tiny pair (pass --prepare to run it here)")
    manifest = prepare(pair, out / "artifacts", cfg.prepare, command="graft device-check", log=print)
    hw = hardware_id(pair.device, pair.target.dtype)
    fitted = from_saba(SabaParams.load(ArtifactDir(out / "artifacts").saba), name=slug(hw) + "-saba")
    fit = None
    if cfg.ar_tree_runs:  # the AR drafter's forwards, so the profile prices EAGLE-3 / OPT-Tree rounds
        curve = ar_draft_cost_curve(drafter_for(pair, "eagle3"), list(cfg.ar_widths), list(cfg.ar_contexts),
                                    prefix_len=min(cfg.costs_prefix, 256), repeats=cfg.costs_repeats)
        fit = fit_ar_draft(curve)
        fitted = with_ar_draft(fitted, fit["c_ar_draft"], {"command": "graft device-check", "hardware": hw,
                                                       "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    fitted.save(out / "cost-profile-saba.json")
    return {"manifest": manifest, "ar_draft_fit": fit,
            "cost_profile": {**fitted.to_dict(), "file": portable(out / "cost-profile-saba.json")}}


def device_profile(report: dict, name: str | None = None) -> CostProfile | None:
    """The device's cost profile from a report's sections (`cost_profile.from_curve`): the verify
    curve (costs), the draft step and AR drafter forward from the calibration's profile (prepare), the
    median host time per round (host); None unless all three ran. The calibration's own fit
    (cost-profile-saba.json) is kept beside it: its rounds are timed from the first decode on, and
    on a GPU the first rounds of each new shape are slow, which its round cost c0 absorbs."""
    sections = report["sections"]
    if any(sections.get(k, {}).get("status") != "ok" for k in ("costs", "host", "prepare")):
        return None
    verify_s = {int(n): ms / 1000 for n, ms in sections["costs"]["result"]["verify_ms"].items()}
    host_s = float(np.median([r["host_total_ms"] for r in sections["host"]["result"]["table"]["rows"]])) / 1000
    saba = sections["prepare"]["result"]["cost_profile"]
    fitted_from = {"command": "graft device-check", "date": report["date"], "graftlib": report["graftlib"],
                   "verify_curve": {"prefix_len": sections["costs"]["result"]["prefix_len"],
                                    "tokens": sorted(verify_s)},
                   "host_s": host_s, "c_draft_from": saba["id"], "dtype": report.get("dtype")}
    return from_curve(name or slug(report["hardware"]) + (f"-{report['dtype']}" if report.get("dtype") else ""),
                      report["hardware"], verify_s, saba["c_draft"], host_s, fitted_from, saba.get("c_ar_draft"))


def bench_section(cfg: CheckConfig, pair, out: Path, prepared: bool) -> dict:
    tdes, saba = artifact_inputs(out / "artifacts") if prepared else (None, None)
    profile = CostProfile.load(out / "cost-profile.json") if (out / "cost-profile.json").is_file() else None
    runs = [Run("ar", None), Run("dflash", pair.drafter.block_size - 1)] + [Run("ddtree", b) for b in cfg.bench_budgets]
    if prepared or not cfg.tiny:  # the tiny pair has no scorer or calibration of its own without prepare
        runs.append(Run("graft", cfg.graft_cap))
    if profile is None or profile.c_ar_draft is not None:  # the shipped profile prices AR-drafted rounds
        runs += [Run(m, b) for m, b in cfg.ar_tree_runs]
    prompts = task_prompts(pair, "gsm8k", cfg.bench_prompts, max_prompt_tokens=cfg.prompt_tokens)
    records = run_bench(pair, prompts, runs, out / "bench.jsonl", BenchSpec(cfg.bench_tokens, cost_profile=profile),
                        MethodInputs(tdes, saba=saba), extra={"task": "gsm8k"}, progress=False)
    rows = summarize(records)
    return {"artifacts": "prepared" if prepared else "shipped", "prompts": len(prompts), "tokens": cfg.bench_tokens,
            "rows": rows, "table": format_table(rows)}


# ----------------------------------------------------------------------------- the run


def tiny_pair(out: Path, device: str, dtype: str | None = None):
    """The tiny random Qwen3 pair, written as a model directory and a z-lab-layout drafter directory
    and loaded by path (a user's own pair)."""
    from graftlib.models.pair import load_pair

    target, drafter = out / "tiny-pair" / "target", out / "tiny-pair" / "drafter"
    if not (target / "config.json").is_file():
        write_target_dir(target, "qwen3", seed=ARCH_SEEDS["qwen3"], initializer_range=0.1)
        write_drafter_dir(drafter, seed=ARCH_SEEDS["qwen3"])
    return load_pair(str(target), str(drafter), device, dtype=dtype)


def run_section(report: dict, name: str, fn, deadline: float, path: Path):
    """Run one section into `report["sections"][name]` (module doc); returns its result or None."""
    entry: dict = {"status": "skipped", "reason": "time budget spent"}
    result = None
    t0 = time.perf_counter()
    if t0 < deadline:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = fn()
                entry = {"status": "ok", "result": result}
            except Skipped as e:
                entry = {"status": "skipped", "reason": str(e)}
            except Exception as e:  # noqa: BLE001  (a section's failure is a finding, never fatal)
                entry = {"status": "error", "error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc(limit=-4)}
        entry.update(seconds=round(time.perf_counter() - t0, 2), warnings=sorted({str(w.message) for w in caught}))
    report["sections"][name] = entry
    write_json_atomic(path, report)
    return result


def device_check(cfg: CheckConfig, out: str | Path, log=print) -> dict:
    """Run every section (module doc) and write out/device-check.json; returns the report."""
    from graftlib.models.pair import load_pair

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "device-check.json"
    start = time.perf_counter()
    deadline = start + 60 * cfg.minutes
    pair = tiny_pair(out, cfg.device, cfg.dtype) if cfg.tiny else load_pair(device=cfg.device, dtype=cfg.dtype)
    report = {"schema": SCHEMA, "graftlib": __version__, "device": cfg.device,
              "dtype": str(pair.target.dtype).removeprefix("torch."), "hardware": hardware_id(pair.device),
              "pair": pair.identity().to_dict(), "config": asdict(cfg), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "sections": {}}
    wanted = set(cfg.sections)
    fns = {"exactness": lambda: exactness_section(cfg, pair), "costs": lambda: costs_section(cfg, pair),
           "host": lambda: host_section(cfg, pair), "prepare": lambda: prepare_section(cfg, pair, out)}
    results = {name: run_section(report, name, fn, deadline, path) for name, fn in fns.items() if name in wanted}
    prepared = results.get("prepare") is not None
    (out / "cost-profile.json").unlink(missing_ok=True)
    profile = device_profile(report)
    if profile is not None:
        profile.save(out / "cost-profile.json")
        report["cost_profile"] = {**profile.to_dict(), "file": portable(out / "cost-profile.json")}
    if "bench" in wanted:
        run_section(report, "bench", lambda: bench_section(cfg, pair, out, prepared), deadline, path)
    report["seconds"] = round(time.perf_counter() - start, 1)
    write_json_atomic(path, report)
    log(format_report(report))
    return report


def headline(name: str, entry: dict) -> str:
    """One line of a section's figures for the table."""
    if entry["status"] != "ok":
        return entry.get("reason") or entry.get("error", "")
    r = entry["result"]
    if name == "exactness":
        return (f"{r['dtype']}: {r['exact']} exact, {r['tie']} tie, {r['mismatch']} mismatch decodes over "
                f"{len(r['rows'])} runs")
    if name == "costs":
        ms = {int(k): v for k, v in r["verify_ms"].items()}
        return "verify ms: " + ", ".join(f"{n} tok {ms[n]:.1f}" for n in sorted(ms) if n in (1, 16, 64, 128, 256, 512))
    if name == "prepare":
        return ", ".join(f"{k} {s['status']} ({s.get('seconds', 0):.0f} s)" for k, s in r["manifest"]["steps"].items())
    if name == "bench":
        return ", ".join(f"{row['key']} x{row['speedup']:.2f}" for row in r["rows"] if row["method"] != "ar")
    return "ok"


def format_report(report: dict) -> str:
    pair = report["pair"]
    title = (f"device check on {report['hardware']} ({report['device']}), pair {pair['target']} + {pair['drafter']}, "
             f"{report.get('seconds', 0):.0f} s")
    lines = [title, "", f"{'section':<10} {'status':<8} {'s':>6}  figures"]
    for name, e in report["sections"].items():
        lines.append(f"{name:<10} {e['status']:<8} {e.get('seconds', 0):>6.1f}  {headline(name, e)}")
        lines += [f"{'':<27}warning: {w}" for w in e.get("warnings", [])]
    ex = report["sections"].get("exactness", {})
    if ex.get("status") == "ok":
        lines += ["", f"{'model':<16} {'run':<16} {'exact':>5} {'tie':>4} {'mismatch':>8} {'max tie gap':>11}"]
        lines += [f"{r['model']:<16} {r['run']:<16} {r['exact']:>5} {r['tie']:>4} {r['mismatch']:>8} "
                  f"{r['max_gap']:>11.3g}" for r in ex["result"]["rows"]]
    bench = report["sections"].get("bench", {})
    if bench.get("status") == "ok":
        lines += ["", bench["result"]["table"]]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- CLI


def add_parser(sub) -> None:
    d = CheckConfig()
    p = sub.add_parser("device-check", help="exactness, verify costs, host overhead, prepare and a short bench on "
                       "one device: one JSON file + a table (experiments/device-check.sh)")
    p.add_argument("--device", default=d.device, help=f"cpu | cuda[:i] (default {d.device})")
    p.add_argument("--dtype", default=None, choices=list(DTYPES),
                   help="the pairs' dtype (default: the device's, float32 on a CPU, bfloat16 on CUDA)")
    p.add_argument("--quick", action="store_true", help="a couple of prompts and fewer sizes (1-3 min)")
    p.add_argument("--tiny", action="store_true", help="the tiny random Qwen3 pair only, smallest sizes (seconds)")
    p.add_argument("--minutes", type=float, default=None, help=f"no section starts after this (default {d.minutes}; "
                   "--quick: 3)")
    p.add_argument("--prepare", dest="run_prepare", action="store_true", default=None,
                   help="run graft prepare also on a CPU with the embedded pair")
    p.add_argument("--no-prepare", dest="run_prepare", action="store_false")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                   help="the sections to run (default: all, in this order)")
    p.add_argument("--out", default=None, help="output folder (default results/device-check-<device>)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = CheckConfig(device=args.device, dtype=args.dtype, run_prepare=args.run_prepare, sections=tuple(args.sections))
    cfg = quick(cfg) if args.quick else cfg
    cfg = tiny(cfg) if args.tiny else cfg
    cfg = replace(cfg, minutes=args.minutes) if args.minutes is not None else cfg
    require(cfg.minutes > 0, f"--minutes must be > 0, got {cfg.minutes}")
    out = Path(args.out) if args.out else results_dir() / f"device-check-{slug(args.device)}"
    report = device_check(cfg, out)
    print(f"\nwritten: {out / 'device-check.json'}")
    failed = [n for n, e in report["sections"].items() if e["status"] == "error"]
    return 1 if failed or not report["sections"].get("exactness", {}).get("result", {}).get("passed", True) else 0
