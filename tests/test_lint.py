"""The line length pyproject.toml sets is the one the code keeps: ruff (its rules, E501 among them) passes on the
package, the tests, the notebooks and the experiment scripts' Python."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_passes_with_the_enforced_line_length():
    ruff = Path(sys.executable).parent / "ruff"
    out = subprocess.run([str(ruff), "check", "graftlib", "tests", "notebooks"], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stdout[-3000:]
    assert 'extend-select = ["E501"]' in (ROOT / "pyproject.toml").read_text()
