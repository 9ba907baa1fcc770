"""Cost profiles: what one round of a decode costs on a machine, as a file, and the modeled time.

Why: wall-clock throughput on a shared machine moves by more than the methods' differences, while
a decode's rounds (accepted lengths, node counts, prefixes) are deterministic at T = 0. Pricing the
rounds with costs measured once on the machine gives a throughput that is the same to the last
digit on every run (the "expected walltime" of Leviathan et al., per round instead of on average).

A profile holds SABA's cost model (`graftlib.methods.saba`, eq. 17 and its graftlib extensions):
  drafted round   C(B, P) = c0 + c1 B + c2 B P [+ c3 log2(1 + B)] [+ c4 P] + delta_B
  AR step         C_AR(P) = a0 + a1 P   (`c_ar`);  declined round: c_draft + C_AR(P)
  AR-drafted      the draft priced per drafter forward (`c_ar_draft` = [e0, e1]); a profile without it
                  refuses to price such a round, never falling back to c_draft
B is the round's verified node count, P its prefix; delta_B the per-budget cost table.

A decode's modeled time (`modeled_seconds`) is the `math.fsum` of its rounds' costs; AR's is one AR step per
token after the first. It leaves out host work the calibration's rounds did not do (e.g. TDES's scorer),
which wall clock pays (`graftlib.lab.report.modeled.validate` states the error). Invariant: a profile's `id`
hashes its cost numbers only, so two files with the same numbers price every decode identically.

Details: docs/internals.md, `graftlib.inputs.cost_profile`.
"""

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR, portable
from graftlib.core.records import read_json_object, write_json_atomic
from graftlib.methods.saba import cost
from graftlib.methods.saba_extensions import table_correction
from graftlib.methods.saba_params import DEFAULT_PATH, SabaParams, checked_rows_cost

SCHEMA = "graft-cost-profile/1"
AR_DRAFT_SCHEMA = "graft-ar-draft-cost/1"
AR_DRAFT_PATH = ASSETS_DIR / "costs" / "cpu-ar-draft.json"  # the embedded EAGLE-3 drafter on this CPU
PAPER_PROFILE = ASSETS_DIR / "costs" / "paper-a100.json"  # the paper's A100 round costs (`graft paper-costs`)
AR_DRAFT_COMMAND = "graft costs --ar-draft"  # measures c_ar_draft (`graftlib.lab.run.costs.cost_curves`)


@dataclass(frozen=True)
class RoundShape:
    """What prices a round: its budget (0: an AR step), verified nodes, prefix, whether it drafted,
    and for an AR-drafted round (EAGLE-3, OPT-Tree) its drafter forwards and their input rows.

    draft_steps 0 is a DFlash round (one block forward, priced by c_draft); draft_steps >= 1 is an
    AR-drafted round (the context step, then one forward per expanded depth; `draft_rows` >=
    draft_steps rows over them). Lists: [budget, nodes, prefix_len, drafted] for a DFlash round (the
    format of every file written before AR-drafted rounds were priced, which load as DFlash rounds),
    [.., draft_steps, draft_rows] for an AR-drafted one.
    """

    budget: int
    nodes: int
    prefix_len: int
    drafted: bool
    draft_steps: int = 0
    draft_rows: int = 0
    rows: int = 0  # LM-head rows the round's walk read (its accepted tokens); 0: unknown (no rows term)

    def __post_init__(self):
        require(self.draft_steps >= 0 and self.draft_rows >= self.draft_steps
                and (self.draft_steps == 0) == (self.draft_rows == 0),
                f"round shape: draft_rows ({self.draft_rows}) must be >= draft_steps ({self.draft_steps}) >= 1, "
                "or both 0 (a DFlash round)")
        require(self.draft_steps == 0 or self.drafted, "round shape: an AR-drafted round (draft_steps >= 1) drafted")

    @property
    def ar_drafted(self) -> bool:
        """Drafted by an AR drafter (priced per forward, `CostProfile.ar_draft_s`)."""
        return self.draft_steps > 0

    @classmethod
    def of(cls, rnd) -> "RoundShape":
        """From a `graftlib.core.decode.RoundRecord` (a declined round has budget 0 and t_draft > 0); an
        AR-drafted round's forwards are its `t_draft_steps` with their `draft_rows`. A round record
        without them (a DFlash decode's, or `graftlib.training.graft.replay`'s `ReplayRecord`) is a DFlash round."""
        steps, rows = getattr(rnd, "t_draft_steps", None), getattr(rnd, "draft_rows", None)
        require((steps is None) == (rows is None) and (rows is None or len(rows) == len(steps)),
                f"round record: {steps!r} draft step times but draft rows {rows!r}")
        drafted = rnd.budget > 0 or rnd.t_draft > 0
        return cls(rnd.budget, rnd.nodes, rnd.prefix_len, drafted, len(steps or []), sum(rows or []),
                   rnd.accepted if rnd.budget > 0 else 0)

    def to_list(self) -> list[int]:
        four = [self.budget, self.nodes, self.prefix_len, int(self.drafted)]
        return four + [self.draft_steps, self.draft_rows] if self.ar_drafted else four

    @classmethod
    def from_record(cls, rec: dict) -> list["RoundShape"]:
        """A bench record's rounds: its `round_shapes` with the rows from its per-round `accepted` list
        (as `of` takes them from the round records; a record without that list prices no rows term)."""
        shapes = [cls.from_list(s) for s in rec["round_shapes"]]
        accepted = rec.get("accepted")
        if not isinstance(accepted, list):
            return shapes
        require(len(accepted) == len(shapes), f"record {rec.get('uid')} {rec.get('key')}: {len(accepted)} accepted "
                f"counts for {len(shapes)} round shapes")
        return [replace(s, rows=int(a) if s.budget > 0 else 0) for s, a in zip(shapes, accepted)]

    @classmethod
    def from_list(cls, row) -> "RoundShape":
        require(isinstance(row, (list, tuple)) and len(row) in (4, 6) and all(isinstance(x, int) for x in row),
                f"round shape must be [budget, nodes, prefix_len, drafted] (+ [draft_steps, draft_rows] for an "
                f"AR-drafted round) integers, got {row!r}")
        try:
            return cls(row[0], row[1], row[2], bool(row[3]), *row[4:])
        except GraftError as e:
            raise GraftError(f"{e}: {row!r}") from None


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
    c_ar_draft: list[float] | None = None  # AR drafter forward: e0 [s/forward], e1 [s/input row]; None: unmeasured
    c_rows: dict | None = None  # {"h": s per LM-head row, "ref": {budget: mean rows}} (module doc); None: no rows term

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
                    f"cost profile {self.name!r}: cost_table maps budgets >= 1 to finite seconds, "
                    f"got {self.cost_table!r}")
            self.cost_table = {str(int(b)): float(d) for b, d in sorted(self.cost_table.items(),
                                                                        key=lambda x: int(x[0]))}
        if self.c_ar_draft is not None:
            require(_numbers(self.c_ar_draft) and len(self.c_ar_draft) == 2 and self.c_ar_draft[0] > 0
                    and self.c_ar_draft[1] >= 0, f"cost profile {self.name!r}: c_ar_draft needs 2 finite numbers "
                    f"(e0 > 0 s per forward, e1 >= 0 s per row), got {self.c_ar_draft!r}")
            self.c_ar_draft = [float(x) for x in self.c_ar_draft]
        if self.c_rows is not None:
            self.c_rows = checked_rows_cost(self.c_rows, f"cost profile {self.name!r}")

    @property
    def id(self) -> str:
        """Content hash of the cost numbers (not name, hardware or provenance)."""
        numbers = {"c": self.c, "c_ar": self.c_ar, "c_draft": self.c_draft, "cost_table": self.cost_table}
        for late in ("c_ar_draft", "c_rows"):  # absent: the id of the profiles written before them
            if getattr(self, late) is not None:
                numbers[late] = getattr(self, late)
        return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def label(self) -> dict:
        """What a record or a figure names: {"name", "id"}."""
        return {"name": self.name, "id": self.id}

    def correction(self, budget: int) -> float:
        """delta_B of the cost table (linear between its budgets, flat beyond); 0 without one."""
        return float(table_correction(self.cost_table, budget))

    def drafted_round_s(self, nodes: int, prefix_len: int, rows: int = 0) -> float:
        """C(B, P) with B = nodes: a whole drafted round (draft, tree, verify, commit), plus the rows term
        when the profile has one and `rows` (the walk's LM-head rows) is known."""
        return float(cost(nodes, prefix_len, self.c)) + self.correction(nodes) + self.rows_s(nodes, rows)

    def rows_s(self, nodes: int, rows: int) -> float:
        """h (rows - ref(B)) (module doc; ref linear in B between the calibration's budgets, flat beyond);
        0 without `c_rows` or with rows unknown (0)."""
        if self.c_rows is None or rows <= 0:
            return 0.0
        ref = self.c_rows["ref"]
        return self.c_rows["h"] * (rows - float(np.interp(nodes, [int(b) for b in ref], list(ref.values()))))

    def ar_step_s(self, prefix_len: int) -> float:
        """C_AR(P): one plain AR step at prefix P."""
        return self.c_ar[0] + self.c_ar[1] * prefix_len

    def ar_draft_s(self, steps: int, rows: int) -> float:
        """An AR drafter's draft step: `steps` forwards of `rows` input rows in all (module doc);
        `GraftError` naming the measuring command if this profile has no `c_ar_draft`."""
        self.require_ar_draft()
        return self.c_ar_draft[0] * steps + self.c_ar_draft[1] * rows

    def require_ar_draft(self) -> None:
        """Refuse (`GraftError`) unless this profile can price AR-drafted rounds."""
        require(self.c_ar_draft is not None,
                f"cost profile {self.name!r} ({self.id}) has no AR drafter cost (c_ar_draft), so it cannot price "
                "an AR-drafted round (EAGLE-3 / OPT-Tree: one drafter forward per depth, not one DFlash block): "
                f"measure it on the profile's machine with `{AR_DRAFT_COMMAND} --cost-profile PROFILE.json "
                "--profile-out NEW.json` and price with NEW.json")

    def round_s(self, shape: RoundShape) -> float:
        """A round's modeled seconds: a drafted round, an AR step, or an AR step after a declined draft;
        an AR-drafted one with its draft priced per forward instead of c_draft (module doc)."""
        if shape.ar_drafted:
            draft = self.ar_draft_s(shape.draft_steps, shape.draft_rows)
            if shape.budget > 0:
                return self.drafted_round_s(shape.nodes, shape.prefix_len, shape.rows) - self.c_draft + draft
            return self.ar_step_s(shape.prefix_len) + draft
        if shape.budget > 0:
            return self.drafted_round_s(shape.nodes, shape.prefix_len, shape.rows)
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
        require(not ({"phi", "alpha"} <= set(d)), f"cost profile file {path} is a SABA calibration, not a cost "
                                                  "profile: "
                "convert it with graftlib.inputs.cost_profile.from_saba(SabaParams.load(path)).save(out)")
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
                       list(params.c_ar), params.c_draft, params.cost_table, fitted_from=fitted_from,
                       c_rows=params.rows_cost)


def from_curve(name: str, hardware: str, verify_s: dict[int, float], c_draft: float, host_s: float,
               fitted_from: dict, c_ar_draft: list[float] | None = None) -> CostProfile:
    """A profile from a verify cost curve measured after warm-up (tokens -> median seconds at one
    prefix, `graftlib.lab.run.costs.cost_curves.verify_cost_curve`): least squares t(n) = v0 + v1 n (v1 >= 0); the AR
    step is the one-token forward, a0 = t(1), a1 = 0 (one prefix measured, so no prefix terms); a
    drafted round of B nodes verifies B + 1 tokens, drafts once and does `host_s` of host work:
    c0 = v0 + v1 + c_draft + host_s, c1 = v1, c2 = 0."""
    n = np.array(sorted(verify_s), dtype=float)
    t = np.array([verify_s[k] for k in sorted(verify_s)], dtype=float)
    require(len(n) >= 2 and n.min() == 1, f"cost profile {name!r}: the verify curve needs 1 token and one more size")
    v1, v0 = np.polyfit(n, t, 1)
    if v1 < 0:
        v1, v0 = 0.0, float(t.mean())
    return CostProfile(name, hardware, [float(v0 + v1 + c_draft + host_s), float(v1), 0.0], [float(t[0]), 0.0],
                       float(c_draft), None, fitted_from=fitted_from, c_ar_draft=c_ar_draft)


def with_ar_draft(profile: CostProfile, c_ar_draft: list[float], provenance: dict) -> CostProfile:
    """`profile` with the AR drafter cost `c_ar_draft` (its id changes); `provenance` (command,
    hardware, threads, ...) goes into fitted_from["c_ar_draft"]."""
    fitted_from = {**profile.fitted_from, "c_ar_draft": provenance}
    return replace(profile, c_ar_draft=list(c_ar_draft), fitted_from=fitted_from)


def load_ar_draft_cost(path: str | Path) -> tuple[list[float], dict]:
    """(c_ar_draft, provenance) of an AR drafter cost file (`AR_DRAFT_SCHEMA`, written by
    `graft costs --ar-draft --ar-draft-out FILE`); `GraftError` naming the file if malformed."""
    d = read_json_object(path, "AR drafter cost", f"regenerate it with `{AR_DRAFT_COMMAND} --ar-draft-out {path}`")
    require(d.get("schema") == AR_DRAFT_SCHEMA,
            f"AR drafter cost file {path}: schema {d.get('schema')!r}, expected {AR_DRAFT_SCHEMA!r}")
    c = d.get("c_ar_draft")
    require(isinstance(c, list) and len(c) == 2 and _numbers(c) and c[0] > 0 and c[1] >= 0,
            f"AR drafter cost file {path}: c_ar_draft "
            f"needs 2 finite numbers (e0 > 0 s per forward, e1 >= 0 s per row), got {c!r}")
    provenance = {k: d[k] for k in ("command", "date", "drafter", "eagle3_id", "hardware", "device", "dtype",
                                    "threads", "note") if k in d}
    return c, {"path": portable(path), **provenance}


def saba_profile() -> CostProfile:
    """The CPU profile's SABA part: the shipped calibration's costs, no AR drafter cost (what
    `graft costs --ar-draft` extends by default, and the profile id of the records written before)."""
    require(DEFAULT_PATH.is_file(), f"the shipped SABA calibration {portable(DEFAULT_PATH)} is missing")
    return from_saba(SabaParams.load(DEFAULT_PATH), "cpu-default")


def default_profile() -> CostProfile:
    """The CPU profile: the shipped SABA calibration's costs and the shipped AR drafter cost (the
    embedded EAGLE-3 drafter's forwards), both measured on this 2-core CPU."""
    require(AR_DRAFT_PATH.is_file(), f"the shipped AR drafter cost {portable(AR_DRAFT_PATH)} is missing "
            f"(regenerate it with `{AR_DRAFT_COMMAND} --ar-draft-out {portable(AR_DRAFT_PATH)}`)")
    return with_ar_draft(saba_profile(), *load_ar_draft_cost(AR_DRAFT_PATH))


def with_costs(params: SabaParams, profile: CostProfile) -> SabaParams:
    """SABA (and CaDDTree, which reads the same params) deciding under `profile`: the calibration's
    cost side (eq. 17's c, the cost table, c_ar, c_draft, rows_cost) replaced by the profile's, its
    gain side (phi, alpha, the gain table, hist_prior, the grid) kept, as the gain does not depend on
    the machine. `meta["cost_profile"]` names the profile, and the calibration is then no longer
    this machine's alone (`graftlib.inputs.artifacts` does not warn about the hardware)."""
    return replace(params, c=list(profile.c), c_ar=list(profile.c_ar), c_draft=profile.c_draft,
                   cost_table=profile.cost_table, rows_cost=profile.c_rows,
                   meta={**params.meta, "cost_profile": profile.label})


def load_profile(path: str | Path | None) -> CostProfile:
    """The profile at `path`, or the default one for None."""
    return default_profile() if path is None else CostProfile.load(path)
