"""`graft modeled`: a results file's modeled figure checked against wall clock, and the paper's claims.

Reads bench records (`graft bench --out`, a notebook's results file; torchrun rank files merged),
prices them under one cost profile (`--cost-profile`, default the shipped CPU one; their rounds as
decoded, `modeled.reprice`), and prints (1) per task and run the wall-clock speedup over AR with
its paired bootstrap interval, the modeled speedup and their error, with the mean absolute error
over runs x tasks (`modeled.validate`), and (2) the nine claims of `graftlib.lab.report.claims` under
both figures. The same is appended as one JSON record to `--out` (nan written as null).

A file can hold several sweeps; a (prompt, run) pair measured under two settings would be pooled
twice and pair with the wrong AR decode, so that is refused with the settings named: pick them
with `--setting` (prefixes of setting ids).
"""

import math
import time
from collections import defaultdict
from pathlib import Path

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import portable, results_dir
from graftlib.core.records import append_record
from graftlib.core.version import __version__
from graftlib.inputs.cost_profile import load_profile
from graftlib.lab.report.claims import claims_summary, evaluate_claims, format_claims
from graftlib.lab.report.modeled import format_validation, reprice, validate
from graftlib.lab.report.paper_costs import PROFILE_NAME, method_errors
from graftlib.lab.run.shard import merged_records


def load_bench_records(paths: list[str], settings: list[str] | None = None) -> list[dict]:
    """The bench records of `paths` (rank files merged), of the settings whose ids start with one of
    `settings` (all if None); one record per (prompt, run) (module doc)."""
    records = []
    for path in paths:
        require(Path(path).is_file(), f"results file {path} does not exist")
        records += [r for r in merged_records(path) if "new_tokens" in r and "key" in r and "uid" in r]
    require(len(records) > 0, f"no bench records in {', '.join(paths)}")
    if settings:
        records = [r for r in records if any(str(r.get("setting_id", "")).startswith(s) for s in settings)]
        require(len(records) > 0, f"no bench records of the settings {settings}")
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        seen[(r["uid"], r["key"])].add(str(r.get("setting_id")))
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    if twice:
        (uid, key), ids = next(iter(twice.items()))
        raise GraftError(f"{len(twice)} (prompt, run) pairs were measured under several settings, e.g. {uid} "
                         f"{key} under {sorted(ids)}: pick one sweep with --setting ID (settings here: "
                         f"{sorted({s for v in seen.values() for s in v})})")
    return records


def report(records: list[dict], budget: int | None = None, cap: int | None = None,
           model_errors: dict[str, float] | None = None) -> dict:
    """Validation, claims per task and the claims' summary of priced records (`model_errors`: `evaluate_claims`')."""
    claims = evaluate_claims(records, budget, cap, model_errors)
    return {"validation": validate(records), "claims": claims, "summary": claims_summary(claims)}


def _json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def add_parser(sub) -> None:
    p = sub.add_parser("modeled", help="modeled vs wall-clock speedup of a results file, and the paper's claims")
    p.add_argument("--results", nargs="+", required=True, metavar="FILE", help="bench JSONL file(s)")
    p.add_argument("--cost-profile", default=None, metavar="FILE",
                   help="cost profile JSON that prices the rounds (default: the shipped CPU profile)")
    p.add_argument("--setting", nargs="+", default=None, metavar="ID", help="only these setting ids (prefixes)")
    p.add_argument("--budget", type=int, default=None,
                   help="DDTree's fixed budget of the Table 2 claims (default: the only ddtree+tdes budget)")
    p.add_argument("--cap", type=int, default=None, help="the adaptive runs' cap (default: the only graft cap)")
    p.add_argument("--out", default=None, help="JSONL file the report is appended to (default results/modeled.jsonl)")
    p.set_defaults(func=run)


def run(args) -> int:
    profile = load_profile(args.cost_profile)
    records = reprice(load_bench_records(args.results, args.setting), profile)
    walked = any(r.get("walked") for r in records)  # no wall clock: the paper profile's own residuals
    rep = report(records, args.budget, args.cap,
                 method_errors(profile) if walked and profile.name == PROFILE_NAME else None)
    print(format_validation(rep["validation"]), "", format_claims(rep["claims"]), "", sep="\n")
    for row in rep["summary"]:
        print(f"{row['claim']}  wall-clock: {row['wall-clock']:<46} modeled: {row['modeled']:<34} {row['paper']}")
    out = Path(args.out) if args.out else results_dir() / "modeled.jsonl"
    append_record(out, {"kind": "modeled-report", "results": [portable(p) for p in args.results],
                        "cost_profile": profile.label, "settings": args.setting,
                        "graftlib": __version__, "time": time.time(), **_json_safe(rep)})
    print(f"report appended to {out}")
    return 0
