"""Records and artifacts name paths portably: relative to the project root or $GRAFT_HOME."""

import json

from graftlib.core.paths import ASSETS_DIR, PROJECT_DIR, portable
from graftlib.methods.registry import MethodInputs
from graftlib.methods.saba_params import DEFAULT_PATH as SABA_PATH
from graftlib.methods.saba_params import SabaParams
from graftlib.methods.tdes import DEFAULT_PATH as TDES_PATH


def test_portable_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path / "home"))
    assert portable(ASSETS_DIR / "tdes" / "default.safetensors") == "graftlib/assets/tdes/default.safetensors"
    assert portable(PROJECT_DIR / "runs" / "drafter-data") == "runs/drafter-data"
    assert portable(tmp_path / "home" / "models" / "smollm2") == "$GRAFT_HOME/models/smollm2"
    assert portable("runs/x") == "runs/x"  # relative stays as given
    assert portable(tmp_path / "elsewhere") == "elsewhere"  # never a machine's absolute path


def test_settings_name_the_shipped_scorer_and_calibration_portably(monkeypatch):
    monkeypatch.delenv("GRAFT_TDES", raising=False)
    monkeypatch.delenv("GRAFT_SABA_PARAMS", raising=False)
    setting = MethodInputs().setting(["graft"])
    assert setting["tdes"] == "graftlib/assets/tdes/default.safetensors"
    assert setting["saba_calibration"] == "graftlib/assets/saba/default.json"
    assert SabaParams.load(SABA_PATH).meta["path"] == "graftlib/assets/saba/default.json"
    assert MethodInputs(tdes=str(TDES_PATH)).setting(["ddtree+tdes"])["tdes"] == setting["tdes"]


def test_shipped_artifacts_hold_no_absolute_paths():
    def strings(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from strings(v)
        elif isinstance(x, list):
            for v in x:
                yield from strings(v)
        elif isinstance(x, str):
            yield x

    files = sorted(ASSETS_DIR.rglob("*.json"))
    assert files
    for f in files:
        absolute = [s for s in strings(json.loads(f.read_text())) if s.startswith("/")]
        assert absolute == [], f"{f.relative_to(PROJECT_DIR)} holds absolute paths {absolute}"


def test_a_linked_folder_keeps_its_name(tmp_path, monkeypatch):
    """A folder that is a link to another disk (e.g. `runs`) is named as written, not by its target."""
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "disk").mkdir()
    (tmp_path / "home" / "runs").symlink_to(tmp_path / "disk")
    assert portable(tmp_path / "home" / "runs" / "x") == "$GRAFT_HOME/runs/x"
    assert portable(tmp_path / "disk" / "x") == "x"  # outside both roots: the name only
