"""SABA's fitted parameters: the file `graft calibrate` writes, its checks and its content id.

A `SabaParams` holds the paper's model (phi, alpha: eq. 16; c: eq. 17; the grid and window of eqs.
14-15) and the switches of graftlib's extensions (`graftlib.methods.saba_extensions`: c_ar / max_skip /
post_gate / c_draft for the AR gates, gain_prior for the online correction, gain_table and
cost_table, rows_cost for the cost profile). `c_ar = None`, no tables and `gain_prior = None` are the
paper's SABA.

Invariants: every field is checked when the params are made, so a bad file fails on load with one
line naming the field; `id` hashes the numbers (not `meta`), and fields added after a calibration
was shipped enter the hash only when set, so a shipped calibration keeps its recorded id;
`default_params()` reads $GRAFT_SABA_PARAMS, then the shipped file, then the builtin placeholder.
"""

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR, portable
from graftlib.core.records import read_json_object

# Under the paper's A100 costs a node is cheap and the best trees are small: the grid reaches down to 4, so SABA's
# candidates bracket the best fixed budget of every committed sweep (`graftlib.lab.workbook.grid_check`).
PAPER_GRID = (4, 8, 12, 16, 24) + tuple(range(32, 513, 16))
CPU_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
GPU_GRID = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)  # verify is about flat to ~100 nodes on a GPU
PARAMS_ENV = "GRAFT_SABA_PARAMS"
DEFAULT_PATH = ASSETS_DIR / "saba" / "default.json"
UTILITIES = ("throughput", "paper")


@dataclass
class SabaParams:
    """Fitted SABA parameters. The defaults are an uncalibrated CPU placeholder (see `meta`)."""

    phi: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 6.0])  # lambda_t = phi^T s_t
    alpha: list[float] = field(default_factory=lambda: [3.0, 0.0, 0.3, 0.0])  # A_t = alpha^T s_t
    c: list[float] = field(default_factory=lambda: [0.065, 1.5e-3, 2e-6])  # c0 [s], c1 [s/node], c2 [, c3, c4]
    grid: list[int] = field(default_factory=lambda: list(CPU_GRID))
    window: int = 8
    hist_prior: float = 2.0
    lam_min: float = 0.5
    utility: str = "throughput"
    c_ar: list[float] | None = None  # AR step cost a0 + a1 * prefix [s]; None: never skip drafting
    max_skip: int = 16  # longest run of AR steps between two probe rounds
    gain_prior: float | None = 8.0  # n0 of the online gain correction (pseudo extra tokens); None: off
    post_gate: bool = True  # after the draft, with this round's state, an AR step may still win (needs c_ar)
    c_draft: float = 0.0  # the draft step's share of c0 [s], sunk once the round has drafted
    gain_table: dict[str, list[float]] | None = None  # {budget: w_B}: E[a_t(B)] = w_B^T s_t; None: eq. 16
    cost_table: dict[str, float] | None = None  # {budget: delta_B [s]} added to eq. 17; None: eq. 17 alone
    # {"h": s per LM-head row, "ref": {budget: mean rows}}: what a round's greedy walk pays per head row
    # beyond the calibration's mean at its budget (`saba_fit.fit_rows_cost`); the cost profile prices it,
    # SABA's own C_t(B) does not (it chooses B before the rows are known). None: not fitted.
    rows_cost: dict | None = None
    meta: dict = field(default_factory=lambda: {"source": "builtin-uncalibrated"})

    def __post_init__(self):
        require(len(self.phi) == 4 and len(self.alpha) == 4, "SABA params: phi and alpha need 4 entries "
                "(conf, degen, hist, bias)")
        require(len(self.c) in (3, 4, 5), "SABA params: c needs 3 to 5 entries (c0, c1, c2[, c3[, c4]])")
        require(len(self.grid) > 0 and all(isinstance(b, int) and b >= 1 for b in self.grid),
                f"SABA params: the budget grid must be positive integers, got {self.grid}")
        require(self.window >= 1, f"SABA params: window must be >= 1, got {self.window}")
        require(self.utility in UTILITIES, f"SABA params: utility must be one of {UTILITIES}, got {self.utility!r}")
        require(self.lam_min > 0, f"SABA params: lam_min must be > 0, got {self.lam_min}")
        require(self.c_ar is None or len(self.c_ar) == 2, "SABA params: c_ar needs 2 entries (a0, a1) or null")
        require(self.max_skip >= 1, f"SABA params: max_skip must be >= 1, got {self.max_skip}")
        require(self.gain_prior is None or self.gain_prior > 0,
                f"SABA params: gain_prior must be > 0 or null, got {self.gain_prior}")
        require(0 <= self.c_draft <= self.c[0], f"SABA params: c_draft must be in [0, c0 = {self.c[0]}], "
                f"got {self.c_draft}")
        if self.gain_table is not None:
            self.gain_table = {str(int(b)): [float(x) for x in w] for b, w in self.gain_table.items()}
            require(len(self.gain_table) > 0 and all(len(w) == 4 for w in self.gain_table.values())
                    and all(int(b) >= 1 for b in self.gain_table),
                    "SABA params: gain_table maps budgets >= 1 to 4 weights (conf, degen, hist, bias)")
            require(self.utility == "throughput", "SABA params: a gain_table needs utility 'throughput'")
        if self.cost_table is not None:
            require(len(self.cost_table) > 0 and all(int(b) >= 1 for b in self.cost_table)
                    and all(math.isfinite(float(d)) for d in self.cost_table.values()),
                    "SABA params: cost_table maps budgets >= 1 to finite corrections in seconds")
            self.cost_table = {str(int(b)): float(d) for b, d in self.cost_table.items()}

        if self.rows_cost is not None:
            self.rows_cost = checked_rows_cost(self.rows_cost, "SABA params")

    @property
    def id(self) -> str:
        """Content hash of the numbers (not the metadata): what a result records as its calibration."""
        d = asdict(self)
        d.pop("meta")
        for late in ("cost_table", "rows_cost"):  # fields added later: calibrations without them keep their id
            if d[late] is None:
                d.pop(late)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> dict:
        return {"id": self.id, **{k: self.meta.get(k) for k in ("source", "path", "target", "drafter", "hardware",
                                                                 "date")}}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**asdict(self), "id": self.id}, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "SabaParams":
        path = Path(path)
        d = read_json_object(path, "SABA params", "run `graft calibrate`")
        d.pop("id", None)
        unknown = set(d) - set(cls.__dataclass_fields__)
        require(not unknown, f"SABA params file {path}: unknown keys {sorted(unknown)}")
        params = cls(**d)
        params.meta = {**params.meta, "path": portable(path)}
        return params


def checked_rows_cost(rows_cost, what: str) -> dict:
    """`rows_cost` ({"h": s >= 0, "ref": {budget >= 1: mean rows >= 1}}) normalized, or `GraftError` naming `what`."""
    msg = (f"{what}: rows_cost needs h (seconds per LM-head row, >= 0) and ref (budgets >= 1 -> mean rows >= 1), "
           f"got {rows_cost!r}")
    try:
        require(isinstance(rows_cost, dict) and set(rows_cost) == {"h", "ref"}, msg)
        h = float(rows_cost["h"])
        ref = {int(b): float(r) for b, r in dict(rows_cost["ref"]).items()}
    except (TypeError, ValueError):
        raise GraftError(msg) from None
    require(math.isfinite(h) and h >= 0 and len(ref) > 0
            and all(b >= 1 and math.isfinite(r) and r >= 1 for b, r in ref.items()), msg)
    return {"h": h, "ref": {str(b): ref[b] for b in sorted(ref)}}


def default_params() -> "SabaParams":
    """$GRAFT_SABA_PARAMS, else graftlib/assets/saba/default.json, else the builtin placeholder."""
    env = os.environ.get(PARAMS_ENV)
    if env:
        return SabaParams.load(env)
    if DEFAULT_PATH.is_file():
        return SabaParams.load(DEFAULT_PATH)
    return SabaParams()
