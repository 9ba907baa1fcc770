"""Where graftlib keeps caches and results, and how records name paths.

GRAFT_HOME (default ~/.cache/graftlib) holds the dequantized embedded target and the
downloaded prompt-set packages; GRAFT_COSTS (default GRAFT_HOME/costs) the cost profiles measured on this
machine; RESULTS_DIR (default ./results) holds benchmark records. All are resolved at call time from the
environment, so tests can redirect them (the suite measures its costs into a folder of its own).

Records and artifacts never store a machine's absolute path: `portable(path)` writes a path
under the project root (the directory holding the `graftlib` package) relative to it, e.g.
`graftlib/assets/tdes/default.safetensors` or `runs/drafter-data`, and one under GRAFT_HOME as
`$GRAFT_HOME/...`; a relative path stays as given. A path outside both is reduced to its name: a
record never holds a machine's absolute path.
"""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
PROJECT_DIR = PACKAGE_DIR.parent
ASSETS_DIR = PACKAGE_DIR / "assets"


def graft_home() -> Path:
    return Path(os.environ.get("GRAFT_HOME", Path.home() / ".cache" / "graftlib"))


def costs_dir() -> Path:
    """Where cost profiles measured on this machine are cached (`graftlib.lab.run.costs.machine_costs`)."""
    return Path(os.environ.get("GRAFT_COSTS", graft_home() / "costs"))


def results_dir() -> Path:
    return Path(os.environ.get("GRAFT_RESULTS", "results"))


def portable(path: str | Path) -> str:
    """`path` as a record stores it: relative to the project root, or `$GRAFT_HOME/...`, as given if
    relative, else its name."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    # as written first (a `runs` link to a larger disk stays `runs/...`), then with links resolved
    for full in (Path(os.path.abspath(path)), path.resolve()):
        for root, prefix in ((PROJECT_DIR, ""), (graft_home().resolve(), "$GRAFT_HOME/")):
            if full.is_relative_to(root):
                return prefix + full.relative_to(root).as_posix()
    return path.name
