"""`graft fit-predictor`: the budget predictor `graft+pred` decodes with, fitted on validation replays.

Input: the JSON lines of a same-prefix replay timed on this machine (`replay_prompts`; the notebook
`budget_policies` writes GSM8K's validation prompts to `budget_policies_val.jsonl`), whose reference rounds carry
their features (`graftlib.methods.budget_predictor.round_features`). The lines of one setting are kept: the one
timed (no cost profile: a walked replay's times are another machine's) over `grid`; several such settings, or none,
are an error that names them. The ridge penalty is chosen by cross-validation over the prompts
(`budget_policy.cross_validated`), the fit refitted on all of them and written as a `BudgetPredictor` whose meta
records the pair and hardware of the SABA calibration the replay ran with (its check on use), the replays, the
setting, the cross-validated retained shares and this command. Where the replays had budget 0, the fit learns
the AR arm too (`budget_policy.Predictor`).

With `--replay-prompts N` it first makes those replays on this machine: GRAFT's trajectory on the first N
validation prompts of each of `--tasks` (`mix.validation_items`: a task without a validation split gives its last eval
prompts), replayed over the grid and timed (`--repeats`, medians kept), appended to
`--replays` (resumable by prompt), so one command fits a predictor on a machine it was never fitted for
(`budget_predictor.FIT_COMMAND`, what a refused predictor names).
"""

import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.paths import PROJECT_DIR, portable
from graftlib.core.records import read_records
from graftlib.inputs.cli_args import add_method_args, add_model_args, method_inputs
from graftlib.lab.report import budget_policy as bp
from graftlib.methods.budget_predictor import DEFAULT_PREDICTOR, BudgetPredictor
from graftlib.methods.saba_params import SabaParams, default_params

ALPHAS = (1.0, 10.0, 100.0, 1000.0)


def timed_lines(records: list[dict], grid: list[int]) -> list[dict]:
    """The lines of the one timed replay setting over `grid` (module doc)."""
    timed = [r for r in records if "cost_profile" not in r.get("setting", {}) and r.get("grid") == grid]
    settings = sorted({r["setting_id"] for r in timed})
    require(len(settings) == 1, f"{len(settings)} timed replay settings over the grid {grid} "
            f"({', '.join(settings) or 'none'}; grids replayed: {sorted({tuple(r.get('grid', ())) for r in records})}):"
            " give a file of one")
    return timed


def _calibration(setting: dict) -> SabaParams:
    """The SABA calibration a replay setting ran with (its path as the setting records it, `core.paths.portable`)."""
    path = Path(setting.get("saba_calibration", ""))
    path = path if path.is_file() or path.is_absolute() else PROJECT_DIR / path
    require(path.is_file(), f"the replays' SABA calibration {setting.get('saba_calibration')!r} is not here: the "
            "predictor records its pair and hardware")
    return SabaParams.load(path)


def fit_predictor(lines: list[dict], alphas=ALPHAS, meta: dict | None = None) -> BudgetPredictor:
    """The ridge predictor cross-validated over `alphas` on `lines` (one replay setting), refitted on all of them."""
    R = bp.rounds(lines)
    require(R.mass is not None, "these replays record no round features (the heap's mass): replay them again")
    best, cv = bp.cross_validated(R, [bp.Predictor("ridge", a) for a in alphas])
    calibration = _calibration(lines[0]["setting"]).meta
    return best.shipped({"pair": calibration.get("pair"), "hardware": calibration.get("hardware"),
                         "fitted": best.name, "cv_retained": cv, "rounds": len(R),
                         "prompts": len(set(R.prompt.tolist())), "setting_id": lines[0]["setting_id"],
                         "task": lines[0].get("task"), **(meta or {})})


def replay_here(args, grid: list[int]) -> None:
    """GRAFT's validation replays over `grid`, timed on this machine, into `args.replays` (module doc)."""
    from graftlib.lab.run.mix import validation_items
    from graftlib.models.pair import load_pair
    from graftlib.training.graft.replay import ReplaySpec, replay_prompts, within_grid

    pair = load_pair(args.target, args.drafter, args.device, args.device_map, dtype=args.dtype)
    inputs = method_inputs(args)
    inputs = replace(inputs, saba=within_grid(inputs.saba or default_params(), grid))
    spec = ReplaySpec(tuple(grid), args.max_new_tokens, args.repeats)
    for task in args.tasks:
        replay_prompts(pair, "graft", max(grid), validation_items(task, args.replay_prompts), args.replays, spec,
                       inputs, log=print)


def main(args) -> int:
    grid = [int(b) for b in args.grid.split(",")]
    if args.replay_prompts:
        require(args.replay_prompts >= 4, f"--replay-prompts {args.replay_prompts}: at least 4 (the fit "
                "cross-validates over 4 folds of prompts)")
        replay_here(args, grid)
    require(Path(args.replays).is_file(), f"no replays at {args.replays}: make them with --replay-prompts N")
    records = read_records(args.replays)
    require(records, f"no replay records in {args.replays}")
    predictor = fit_predictor(timed_lines(records, grid), meta={
        "replays": portable(args.replays), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "graft fit-predictor " + shlex.join(sys.argv[2:])})
    out = predictor.save(args.out)
    print(f"{out}: {predictor.meta['fitted']} over budgets {predictor.budgets} on {predictor.meta['rounds']} rounds "
          f"of {predictor.meta['prompts']} prompts (cross-validated retained share "
          f"{predictor.meta['cv_retained'][predictor.meta['fitted']]:.3f}); id {predictor.id}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("fit-predictor", help="fit graft+pred's per-round budget predictor on validation replays")
    add_model_args(p)
    add_method_args(p)
    p.add_argument("--replays", type=Path, default=Path("results/predictor_val.jsonl"),
                   help="replay JSONL timed on this machine with round features (e.g. the budget_policies "
                        "notebook's budget_policies_val.jsonl; with --replay-prompts, where they are written)")
    p.add_argument("--grid", default="2,4,8,12,16,24,32",
                   help="the replay's budget grid (comma-separated; 0: the AR step, an arm of the predictor)")
    p.add_argument("--replay-prompts", type=int, default=0,
                   help="first replay GRAFT on this many validation prompts of each task here (0: read --replays)")
    p.add_argument("--tasks", nargs="+", default=["gsm8k"], help="the tasks of --replay-prompts")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens a replayed prompt decodes")
    p.add_argument("--repeats", type=int, default=3, help="timing repeats per (round, budget); medians kept")
    p.add_argument("--out", type=Path, default=DEFAULT_PREDICTOR, help="predictor JSON to write")
    p.set_defaults(func=main)
