"""Cost profiles: what one round of a decode costs on a machine, as a file, and the modeled time.

Why: wall-clock throughput on a shared machine moves by more than the methods' differences, while
a decode's rounds (accepted lengths, node counts, prefixes) are deterministic at T = 0. Pricing the
rounds with costs measured once on the machine gives a throughput that is the same to the last
digit on every run (the "expected walltime" of Leviathan et al., per round instead of on average).

A profile holds SABA's cost model (`graftlib.methods.saba`, eq. 17 and its graftlib extensions):
  drafted round   C(B, P) = c0 + c1 B + c2 B P [+ c3 log2(1 + B)] [+ c4 P] + delta_B     (eq. 17 + table)
                  the whole round: draft (c_draft, part of c0), tree, verify, commit;
  AR step         C_AR(P) = a0 + a1 P   (`c_ar`);
  declined round  c_draft + C_AR(P)     (drafted, then run as an AR step: the draft is paid).
delta_B is the per-budget cost table (linear in B between its budgets, flat beyond; none: 0).
B is the round's verified node count (`RoundRecord.nodes`; the calibration's trees fill their
budget, so there B = nodes), P its prefix (`RoundRecord.prefix_len`, tokens in the target cache).

A decode's modeled time (`modeled_seconds`) is the sum of its rounds' costs; the AR baseline's
(`ar_modeled_seconds`) is one AR step per token after the first, at prefixes prompt_len,
prompt_len + 1, ... Sums are `math.fsum` (correctly rounded), so the figure depends only on the
profile's numbers and the rounds. What it leaves out: host work the calibration's rounds did not
do (the update step between rounds, a scorer heavier than DDTree's heap, e.g. TDES's), which wall
clock pays; `graftlib.lab.modeled.validate` states the resulting error.

File format (`SCHEMA`): JSON with name, hardware, fitted_from (where the numbers come from), c,
c_ar, c_draft, cost_table (or null). `default_profile()` derives the CPU profile from the shipped
SABA calibration (`graftlib/assets/saba/default.json`, measured on this 2-core CPU); a profile for
another machine (e.g. an H200 one written by a GPU device check, `from_saba(params).save(path)`)
is another file of the same schema. Invariant: `id` hashes the cost numbers only, so two files
with the same numbers price every decode identically and share an id.
"""

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import portable
from graftlib.core.records import read_json_object, write_json_atomic
from graftlib.methods.saba import DEFAULT_PATH, SabaParams, round_cost

SCHEMA = "graft-cost-profile/1"


@dataclass(frozen=True)
class RoundShape:
    """What prices a round: its budget (0: an AR step), verified nodes, prefix and whether it drafted."""

    budget: int
    nodes: int
    prefix_len: int
    drafted: bool

    @classmethod
    def of(cls, rnd) -> "RoundShape":
        """From a `graftlib.core.decode.RoundRecord` (a declined round has budget 0 and t_draft > 0)."""
        return cls(rnd.budget, rnd.nodes, rnd.prefix_len, rnd.budget > 0 or rnd.t_draft > 0)

    def to_list(self) -> list[int]:
        return [self.budget, self.nodes, self.prefix_len, int(self.drafted)]

    @classmethod
    def from_list(cls, row) -> "RoundShape":
        require(isinstance(row, (list, tuple)) and len(row) == 4 and all(isinstance(x, int) for x in row),
                f"round shape must be [budget, nodes, prefix_len, drafted] integers, got {row!r}")
        return cls(row[0], row[1], row[2], bool(row[3]))


@dataclass
class CostProfile:
    """A machine's round costs (module doc); load with `CostProfile.load`, write with `save`."""

    name: str
    hardware: str
    c: list[float]  # eq. 17: c0 [s] (draft included), c1 [s/node], c2 [s/(node x token)] [, c3, c4]
    c_ar: list[float]  # AR step: a0 [s], a1 [s/token]
    c_draft: float  # the draft step's share of c0 [s]
    cost_table: dict[str, float] | None = None  # {budget: delta_B [s]}; None: eq. 17 alone
    fitted_from: dict = field(default_factory=dict)
    schema: str = SCHEMA

    def __post_init__(self):
        require(self.schema == SCHEMA, f"cost profile {self.name!r}: schema {self.schema!r}, expected {SCHEMA!r}")
        require(isinstance(self.name, str) and self.name.strip() != "", "cost profile: name must be a non-empty string")
        require(isinstance(self.hardware, str), f"cost profile {self.name!r}: hardware must be a string")
        require(isinstance(self.fitted_from, dict), f"cost profile {self.name!r}: fitted_from must be an object")
        require(_numbers(self.c) and 3 <= len(self.c) <= 5,
                f"cost profile {self.name!r}: c needs 3 to 5 finite numbers (c0, c1, c2[, c3[, c4]]), got {self.c!r}")
        require(_numbers(self.c_ar) and len(self.c_ar) == 2,
                f"cost profile {self.name!r}: c_ar needs 2 finite numbers (a0, a1), got {self.c_ar!r}")
        require(self.c[0] > 0 and self.c_ar[0] > 0, f"cost profile {self.name!r}: c0 and a0 must be > 0 "
                "(no round is free)")
        require(_numbers([self.c_draft]) and 0 <= self.c_draft <= self.c[0],
                f"cost profile {self.name!r}: c_draft must be in [0, c0 = {self.c[0]}], got {self.c_draft!r}")
        self.c, self.c_ar, self.c_draft = [float(x) for x in self.c], [float(x) for x in self.c_ar], float(self.c_draft)
        if self.cost_table is not None:
            ok = isinstance(self.cost_table, dict) and len(self.cost_table) > 0 and _numbers(self.cost_table.values())
            require(ok and all(str(b).isdigit() and int(b) >= 1 for b in self.cost_table),
                    f"cost profile {self.name!r}: cost_table maps budgets >= 1 to finite seconds, got {self.cost_table!r}")
            self.cost_table = {str(int(b)): float(d) for b, d in sorted(self.cost_table.items(), key=lambda x: int(x[0]))}

    @property
    def id(self) -> str:
        """Content hash of the cost numbers (not name, hardware or provenance)."""
        numbers = {"c": self.c, "c_ar": self.c_ar, "c_draft": self.c_draft, "cost_table": self.cost_table}
        return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def label(self) -> dict:
        """What a record or a figure names: {"name", "id"}."""
        return {"name": self.name, "id": self.id}

    def correction(self, budget: int) -> float:
        """delta_B of the cost table (linear between its budgets, flat beyond); 0 without one."""
        if self.cost_table is None:
            return 0.0
        return float(np.interp(budget, [int(b) for b in self.cost_table], list(self.cost_table.values())))

    def drafted_round_s(self, nodes: int, prefix_len: int) -> float:
        """C(B, P) with B = nodes: a whole drafted round (draft, tree, verify, commit)."""
        return round_cost(nodes, prefix_len, self.c) + self.correction(nodes)

    def ar_step_s(self, prefix_len: int) -> float:
        """C_AR(P): one plain AR step at prefix P."""
        return self.c_ar[0] + self.c_ar[1] * prefix_len

    def round_s(self, shape: RoundShape) -> float:
        """A round's modeled seconds: a drafted round, an AR step, or an AR step after a declined draft."""
        if shape.budget > 0:
            return self.drafted_round_s(shape.nodes, shape.prefix_len)
        return self.ar_step_s(shape.prefix_len) + (self.c_draft if shape.drafted else 0.0)

    def modeled_seconds(self, shapes: list[RoundShape]) -> float:
        """A speculative decode's modeled time: the fsum of its rounds' costs."""
        return math.fsum(self.round_s(s) for s in shapes)

    def ar_modeled_seconds(self, prompt_len: int, new_tokens: int) -> float:
        """An AR decode's modeled time: new_tokens - 1 AR steps at prefixes prompt_len, prompt_len + 1, ..."""
        return math.fsum(self.ar_step_s(prompt_len + k) for k in range(max(new_tokens - 1, 0)))

    def to_dict(self) -> dict:
        return {**asdict(self), "id": self.id}

    def save(self, path: str | Path) -> Path:
        """Written atomically (a reader never sees half a profile)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, self.to_dict())
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "CostProfile":
        """A profile file; `GraftError` naming the file and the problem if it is missing or malformed."""
        path = Path(path)
        d = read_json_object(path, "cost profile")
        require(not ({"phi", "alpha"} <= set(d)), f"cost profile file {path} is a SABA calibration, not a cost profile: "
                "convert it with graftlib.methods.cost_profile.from_saba(SabaParams.load(path)).save(out)")
        d.pop("id", None)
        fields = set(cls.__dataclass_fields__)
        unknown, missing = set(d) - fields, {"name", "hardware", "c", "c_ar", "c_draft"} - set(d)
        require(not unknown, f"cost profile file {path}: unknown keys {sorted(unknown)}")
        require(not missing, f"cost profile file {path}: missing keys {sorted(missing)}")
        try:
            return cls(**d)
        except GraftError as e:
            raise GraftError(f"cost profile file {path}: {e}") from None


def _numbers(xs) -> bool:
    """All finite real numbers (bools excluded)."""
    try:
        return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in xs)
    except TypeError:
        return False


def from_saba(params: SabaParams, name: str | None = None) -> CostProfile:
    """The cost profile of a SABA calibration (its c, c_ar, c_draft and cost table); needs c_ar."""
    require(params.c_ar is not None, "this SABA calibration has no AR step cost (c_ar): run `graft calibrate`")
    meta = params.meta
    fitted_from = {"saba_params": params.id, **{k: meta[k] for k in ("source", "path", "command", "date", "target",
                                                                       "drafter", "device", "dtype", "threads")
                                                 if k in meta}}
    return CostProfile(name or f"saba-{params.id}", meta.get("hardware") or "unknown", list(params.c),
                       list(params.c_ar), params.c_draft, params.cost_table, fitted_from)


def default_profile() -> CostProfile:
    """The CPU profile: the shipped SABA calibration's costs (measured on this 2-core CPU)."""
    require(DEFAULT_PATH.is_file(), f"the shipped SABA calibration {portable(DEFAULT_PATH)} is missing")
    return from_saba(SabaParams.load(DEFAULT_PATH), "cpu-default")


def load_profile(path: str | Path | None) -> CostProfile:
    """The profile at `path`, or the default one for None."""
    return default_profile() if path is None else CostProfile.load(path)
