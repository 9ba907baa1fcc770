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


def portable(path: str | Path) -> str:
    """`path` as a record may store it: relative to the project root (the checkout holding
    graftlib/), else `$GRAFT_HOME/...`, else as given when relative; never a machine's absolute
    path (an absolute path elsewhere is reduced to its name)."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        return p.as_posix()
    p = p.resolve()
    for base, prefix in ((PACKAGE_DIR.parent, ""), (graft_home().expanduser().resolve(), "$GRAFT_HOME/")):
        if p.is_relative_to(base):
            return prefix + p.relative_to(base).as_posix()
    return p.name
