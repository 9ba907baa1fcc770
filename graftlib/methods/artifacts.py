"""Artifacts fitted for one model pair on one machine: what they record, the check on use, their folder.

A TDES scorer is trained on one target's embeddings and one drafter's candidate pools; a SABA
calibration fits one pair's acceptance and one machine's round costs. Each records
  pair      the `PairId` it was fitted for (`graftlib.models.pair`: names + weight fingerprints)
  hardware  the machine it was fitted on (`graftlib.core.hardware.hardware_id`)
(a scorer in its JSON config, a calibration in its `meta`). On use (`check_scorer`,
`check_calibration`, called by `graftlib.methods.registry` whenever a method loads one) they are
compared with the pair and machine at hand:
  - another pair: GraftError naming both pairs and the `graft prepare` command that makes this
    pair's artifacts;
  - the same pair on other hardware: for a calibration a `HardwareMismatchWarning` with that
    command (its costs, and so SABA's budgets, are the other machine's); a scorer is the pair's on
    any machine, so it is not warned about;
  - an artifact that records no pair (made by hand, or older than this check): not checked.

The folder `graft prepare` writes (`ArtifactDir`), one per pair: traces/ (`graft traces`),
tdes.safetensors + tdes.json (`graft train-tdes`), per-task scorers tdes-<task>.safetensors +
.json (`graft train-tdes --tasks <task>`, on the same traces), saba.json (`graft calibrate`) and
manifest.json (the pair, the hardware, each step's settings and outputs). `--artifacts DIR`
(`graftlib.methods.args`) points the decoding commands at it (`artifact_inputs`).

The shipped artifacts (`ShippedAssets`, a root that defaults to graftlib/assets and is a parameter
so tests never write into the repository): tdes/<name>.safetensors + .json (`default`: all tasks,
`gsm8k`: GSM8K only), saba/default.json and saba/paper-a100.json (the paper's grid and costs), all fitted for the embedded pair (`make artifacts`
refreshes them from one `graft prepare` folder, `graftlib.training.ship`). `check_shipped` lists
every shipped scorer or calibration that records no pair or another pair than the embedded one
(by fingerprints, so a retrained drafter makes every artifact fitted for the old one show up).
"""

import re
import shlex
import warnings
from dataclasses import dataclass
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.paths import ASSETS_DIR, portable
from graftlib.core.records import read_json_object
from graftlib.methods.saba_params import SabaParams
from graftlib.methods.tdes import scorer_config, scorer_paths
from graftlib.models.drafter import EMBEDDED_DFLASH2_DIR
from graftlib.models.eagle3 import EMBEDDED_EAGLE3_DIR
from graftlib.models.pair import PairId

ARTIFACTS_ROOT = Path("artifacts")
MANIFEST_SCHEMA = "graft-artifacts/1"


class HardwareMismatchWarning(UserWarning):
    """A SABA calibration of this pair, fitted on another machine."""


@dataclass(frozen=True)
class ArtifactDir:
    """The files of one pair's artifact folder (module doc)."""

    root: Path

    @property
    def traces(self) -> Path:
        return self.root / "traces"

    @property
    def tdes(self) -> Path:
        return self.root / "tdes.safetensors"

    def task_tdes(self, task: str) -> Path:
        """The scorer trained on `task`'s traces only."""
        return self.root / f"tdes-{task}.safetensors"

    @property
    def saba(self) -> Path:
        return self.root / "saba.json"

    @property
    def saba_paper(self) -> Path:
        """SABA on the paper's grid deciding under the paper's A100 costs (`graft prepare`'s step 4)."""
        return self.root / "saba-paper-a100.json"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    def read_manifest(self) -> dict:
        """The folder's manifest (GraftError when it is malformed or of another schema)."""
        manifest = read_json_object(self.manifest, "artifacts manifest")
        require(manifest.get("schema") == MANIFEST_SCHEMA,
                f"{self.manifest}: schema {manifest.get('schema')!r}, expected {MANIFEST_SCHEMA!r}")
        return manifest


@dataclass(frozen=True)
class ShippedAssets:
    """The shipped scorers and calibration under `root` (module doc)."""

    root: Path = ASSETS_DIR

    def tdes(self, name: str = "default") -> Path:
        return self.root / "tdes" / f"{name}.safetensors"

    @property
    def saba(self) -> Path:
        return self.root / "saba" / "default.json"

    @property
    def saba_paper(self) -> Path:
        return self.root / "saba" / "paper-a100.json"

    def calibrations(self) -> list[Path]:
        """Every shipped SABA calibration: default.json (this CPU's) and those deciding under another
        machine's cost profile (paper-a100.json: the paper's grid and A100 costs)."""
        return sorted((self.root / "saba").glob("*.json"))

    @property
    def ar_draft_cost(self) -> Path:
        """The AR drafter cost of the CPU cost profile (`graftlib.methods.cost_profile.AR_DRAFT_PATH`)."""
        return self.root / "costs" / "cpu-ar-draft.json"

    @property
    def eagle3(self) -> Path:
        """The embedded target's EAGLE-3 drafter directory (`graftlib.models.eagle3.EMBEDDED_EAGLE3_DIR`)."""
        return self.root / EMBEDDED_EAGLE3_DIR.relative_to(ASSETS_DIR)

    @property
    def dflash2(self) -> Path:
        """The embedded DFlash 2 drafter directory (`graftlib.models.drafter.EMBEDDED_DFLASH2_DIR`)."""
        return self.root / EMBEDDED_DFLASH2_DIR.relative_to(ASSETS_DIR)

    def scorers(self) -> dict[str, Path]:
        """{name: weights path} of every shipped scorer."""
        return {p.stem: p for p in sorted((self.root / "tdes").glob("*.safetensors"))}


def check_shipped(assets: ShippedAssets, embedded: PairId) -> list[str]:
    """One line per shipped scorer or calibration that does not record the `embedded` pair (empty: all do)."""
    def where(path: Path) -> str:  # named from the root (a root outside the project keeps its name)
        return f"{portable(assets.root)}/{path.relative_to(assets.root).as_posix()}"

    records = {where(p.with_suffix(".json")): scorer_config(p) for p in assets.scorers().values()}
    records.update({where(p): SabaParams.load(p).meta for p in assets.calibrations()})
    problems = [] if records else [f"{portable(assets.root)} holds no TDES scorer and no SABA calibration"]
    for where, record in records.items():
        if record.get("pair") is None:
            problems.append(f"{where} records no pair (fitted for which drafter?)")
            continue
        fitted = PairId.from_dict(record["pair"], where)
        if not fitted.same(embedded):
            problems.append(f"{where} was fitted for {fitted}, not for the embedded pair {embedded}: "
                            "refresh the shipped artifacts with `make artifacts`")
    return problems


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


def artifact_inputs(artifacts: str | Path | None, tdes: str | None = None) -> tuple[str | None, SabaParams | None]:
    """(TDES scorer path, SABA calibration) of a `graft prepare` folder; an explicit `tdes` wins.
    None: (tdes, None), i.e. the shipped defaults (`graftlib.methods.registry.make_parts`)."""
    if artifacts is None:
        return tdes, None
    d = ArtifactDir(Path(artifacts))
    require(d.root.is_dir(), f"artifacts folder {d.root} does not exist: make one with `graft prepare --out {d.root}`")
    require(d.tdes.is_file() or d.saba.is_file(), f"artifacts folder {d.root} holds neither {d.tdes.name} nor "
            f"{d.saba.name}: run `graft prepare --out {d.root}` (it resumes)")
    saba = SabaParams.load(d.saba) if d.saba.is_file() else None
    return tdes or (str(d.tdes) if d.tdes.is_file() else None), saba
