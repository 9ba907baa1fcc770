"""The files of fitted artifacts: one pair's `graft prepare` folder and the shipped assets.

The folder `graft prepare` writes (`ArtifactDir`), one per pair (`graftlib.methods.fitted.default_dir`):
traces/ (`graft traces`), tdes.safetensors + tdes.json (`graft train-tdes`), per-task scorers
tdes-<task>.safetensors + .json (on the same traces), saba.json (`graft calibrate`), saba-paper-a100.json
(SABA on the paper's grid under its A100 costs) and manifest.json (the pair, the hardware, each step's
settings and outputs). A folder made with `--strength FILE` holds the same parts fitted on the drafter-strength
construction (`graftlib.models.strength`), without saba.json: a construction is never timed. `--artifacts DIR`
(`graftlib.inputs.cli_args`) points the decoding commands at it (`artifact_inputs`).

The shipped artifacts (`ShippedAssets`, a root that defaults to graftlib/assets and is a parameter so
tests never write into the repository): tdes/<name>.safetensors + .json (`default`: all tasks, `gsm8k`:
GSM8K only; `paper-acceptance` and `paper-acceptance-gsm8k`: the same on the construction, `acceptance_name`
for each of its calibrations), saba/default.json, saba/paper-a100.json and saba/paper-acceptance[-<calibration>].json
(the construction's), all fitted for the embedded pair (`make
artifacts` refreshes them from one `graft prepare` folder, `graftlib.training.ship`). `check_shipped`
lists every shipped scorer or calibration that records no pair or another pair than the embedded one (by
fingerprints, so a retrained drafter makes every artifact fitted for the old one show up).
"""


from dataclasses import dataclass
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.paths import ASSETS_DIR, portable
from graftlib.core.records import read_json_object
from graftlib.methods.saba_params import SabaParams
from graftlib.methods.tdes import scorer_config
from graftlib.models.drafter import EMBEDDED_DFLASH2_DIR
from graftlib.models.eagle3 import EMBEDDED_EAGLE3_DIR
from graftlib.models.pair import PairId

MANIFEST_SCHEMA = "graft-artifacts/1"
ACCEPTANCE = "paper-acceptance"  # the shipped names of the parts fitted on the drafter-strength construction


def acceptance_name(calibration: str | None = "own-spine") -> str:
    """The shipped name of GRAFT's parts fitted on a drafter-strength calibration (`models.strength.CALIBRATIONS`):
    `paper-acceptance` for `own-spine` (and a calibration of no shipped name), `paper-acceptance-<name>` else."""
    return ACCEPTANCE if calibration in (None, "own-spine") else f"{ACCEPTANCE}-{calibration}"


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

    @property
    def saba_paper_acceptance(self) -> Path:
        """SABA on the paper's grid under its A100 costs, fitted on the drafter-strength construction."""
        return self.saba_acceptance()

    def saba_acceptance(self, calibration: str | None = "own-spine") -> Path:
        """SABA on the paper's grid under its A100 costs, fitted on the construction at `calibration`."""
        return self.root / "saba" / f"{acceptance_name(calibration)}.json"

    def acceptance_scorers(self, calibration: str | None = "own-spine") -> dict[str, Path]:
        """The TDES scorers fitted on the construction at `calibration`: "default" (all tasks) and "gsm8k"
        (Figure 5)."""
        name = acceptance_name(calibration)
        return {"default": self.tdes(name), "gsm8k": self.tdes(f"{name}-gsm8k")}

    def calibrations(self) -> list[Path]:
        """Every shipped SABA calibration: default.json (this CPU's) and those deciding under another
        machine's cost profile (paper-a100.json: the paper's grid and A100 costs)."""
        return sorted((self.root / "saba").glob("*.json"))

    @property
    def ar_draft_cost(self) -> Path:
        """The AR drafter cost of the CPU cost profile (`graftlib.inputs.cost_profile.AR_DRAFT_PATH`)."""
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
