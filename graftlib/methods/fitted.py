"""The check on use of an artifact fitted for one model pair on one machine (a TDES scorer, a SABA calibration).

Each records `pair` (the `PairId` it was fitted for: names + weight fingerprints, `graftlib.models.pair`)
and `hardware` (`graftlib.core.hardware.hardware_id`): a scorer in its JSON config, a calibration in its
`meta`. `check_scorer`, `check_calibration` and `check_predictor` (run by `graftlib.methods.registry` whenever
a method loads one) compare them with the pair and machine at hand: another pair is a GraftError naming both
pairs and the `graft prepare` command that makes this pair's artifacts (`prepare_command`, into `default_dir`);
the same pair on other hardware is, for a calibration, a `HardwareMismatchWarning` (its costs, and so SABA's
budgets, are the other machine's), for a budget predictor a GraftError with the command that fits one there (it
has no cost model to swap: the machine's round times are in its weights); a scorer is the pair's on any
machine; an artifact that records no pair (made by hand) is not checked.
"""

import re
import shlex
import warnings
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.paths import portable
from graftlib.methods.budget_predictor import FIT_COMMAND, FIT_MINUTES, FIT_PROMPTS, BudgetPredictor
from graftlib.methods.saba_params import SabaParams
from graftlib.methods.tdes import scorer_config, scorer_paths
from graftlib.models.pair import PairId

ARTIFACTS_ROOT = Path("artifacts")


class HardwareMismatchWarning(UserWarning):
    """A SABA calibration of this pair, fitted on another machine."""


def slug(text: str) -> str:
    """`text` as a file name: runs of other characters than letters, digits, '.', '_', '-' become '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unknown"


def default_dir(pair: PairId) -> Path:
    """artifacts/<target>--<drafter>-<drafter fingerprint> (the last path component of each name): one
    folder per drafter's weights, so a retrained drafter of the same name (e.g. a newly shipped
    `embedded`) starts a folder of its own while a re-run for the same weights resumes its folder."""
    names = "--".join(slug(Path(n.rstrip("/")).name if n != "?" else "") for n in (pair.target, pair.drafter))
    return ARTIFACTS_ROOT / f"{names}-{pair.drafter_fingerprint}"


def prepare_command(pair: PairId, hardware: str) -> str:
    """The `graft prepare` command that makes this pair's artifacts on this machine."""
    names = [shlex.quote(n) if n != "?" else placeholder for n, placeholder in ((pair.target, "TARGET"),
                                                                               (pair.drafter, "DRAFTER"))]
    device = " --device cuda" if hardware.startswith("cuda") else ""
    return f"graft prepare --target {names[0]} --drafter {names[1]}{device} --out {default_dir(pair)}"


def _remedy(pair: PairId, hardware: str) -> str:
    return (f"make this pair's scorer and calibration with `{prepare_command(pair, hardware)}` and pass "
            f"`--artifacts {default_dir(pair)}`")


def check_fitted(what: str, where: str, record: dict, pair: PairId, hardware: str, per_machine: bool) -> None:
    """The check of the module doc on one artifact's `record` (the dict holding 'pair' and 'hardware')."""
    if record.get("pair") is None:
        return
    fitted = PairId.from_dict(record["pair"], f"{what} {where}")
    require(fitted.same(pair), f"{what} {where} was fitted for {fitted}, not for this pair, {pair}: "
            + _remedy(pair, hardware))
    recorded = record.get("hardware")
    if per_machine and recorded is not None and recorded != hardware:
        warnings.warn(f"{what} {where} was fitted on {recorded}, this run is on {hardware}: its round costs, "
                      f"and so SABA's budgets, are that machine's; {_remedy(pair, hardware)}",
                      HardwareMismatchWarning, stacklevel=2)


def check_scorer(path: str | Path, pair: PairId, hardware: str) -> None:
    """A TDES scorer must be this pair's (any machine)."""
    check_fitted("TDES scorer", portable(scorer_paths(path)[0]), scorer_config(path), pair, hardware, False)


def check_calibration(params: SabaParams, pair: PairId, hardware: str) -> None:
    """A SABA calibration must be this pair's, and should be this machine's unless it decides under a
    named cost profile (`meta["cost_profile"]`: another machine's costs on purpose)."""
    check_fitted("SABA calibration", params.meta.get("path", "(in memory)"), params.meta, pair, hardware,
                 "cost_profile" not in params.meta)


def check_predictor(predictor: BudgetPredictor, pair: PairId, hardware: str) -> None:
    """A budget predictor must be this pair's and this machine's (module doc)."""
    where = predictor.meta.get("path", "(in memory)")
    check_fitted("budget predictor", where, predictor.meta, pair, hardware, False)
    recorded = predictor.meta.get("hardware")
    require(predictor.meta.get("pair") is None or recorded in (None, hardware),
            f"budget predictor {where} was fitted on {recorded}, not on this machine ({hardware}), whose round times "
            f"decide every budget: fit one here with `{FIT_COMMAND}` ({FIT_PROMPTS} validation prompts, about "
            f"{FIT_MINUTES} min on a 2-core CPU) and pass `--predictor results/predictor.json`")
