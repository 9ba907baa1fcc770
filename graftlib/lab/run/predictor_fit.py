"""`graft fit-predictor`: the budget predictor `graft+pred` decodes with, fitted on validation replays.

Input: the JSON lines of a same-prefix replay timed on this machine (`replay_prompts`; the notebook
`budget_policies` writes GSM8K's validation prompts to `budget_policies_val.jsonl`), whose reference rounds carry
their features (`graftlib.methods.budget_predictor.round_features`). The lines of one setting are kept: the one
timed (no cost profile: a walked replay's times are another machine's) over `grid`; several such settings, or none,
are an error that names them. The ridge penalty is chosen by cross-validation over the prompts
(`budget_policy.cross_validated`), the fit refitted on all of them and written as a `BudgetPredictor` whose meta
records the pair and hardware of the SABA calibration the replay ran with (its check on use), the replays, the
setting, the cross-validated retained shares and this command.
"""

import shlex
import sys
import time
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.paths import PROJECT_DIR, portable
from graftlib.core.records import read_records
from graftlib.lab.report import budget_policy as bp
from graftlib.methods.budget_predictor import DEFAULT_PREDICTOR, BudgetPredictor
from graftlib.methods.saba_params import SabaParams

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


def main(args) -> int:
    grid = [int(b) for b in args.grid.split(",")]
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
    p.add_argument("--replays", type=Path, required=True,
                   help="replay JSONL timed on this machine with round features (e.g. the budget_policies "
                        "notebook's budget_policies_val.jsonl)")
    p.add_argument("--grid", default="2,4,8,12,16,24,32", help="the replay's budget grid (comma-separated)")
    p.add_argument("--out", type=Path, default=DEFAULT_PREDICTOR, help="predictor JSON to write")
    p.set_defaults(func=main)
