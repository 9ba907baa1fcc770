"""Where graftlib keeps caches and results.

GRAFT_HOME (default ~/.cache/graftlib) holds the dequantized embedded target and the
downloaded prompt-set packages; RESULTS_DIR (default ./results) holds benchmark records.
Both are resolved at call time from the environment, so tests can redirect them.
"""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
ASSETS_DIR = PACKAGE_DIR / "assets"


def graft_home() -> Path:
    return Path(os.environ.get("GRAFT_HOME", Path.home() / ".cache" / "graftlib"))


def results_dir() -> Path:
    return Path(os.environ.get("GRAFT_RESULTS", "results"))
