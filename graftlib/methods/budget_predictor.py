"""A fitted per-round budget predictor and the method that decodes with it (`graft+pred`).

What a round knows before it verifies (`round_features`, recorded by every replay on its reference rounds): per
depth the drafter's top-1 probability q1 and the probability its top-K candidates cover qk, and per budget B the
score mass of the heap's first B pops, mass_t(B) = sum exp(score) (the tree's own forecast of its accepted draft
tokens; GRAFT's scores include beta f~). `features` turns those, with s_t = (conf_t, degen_t, hist_t) and log
prefix_t, into x_t: the four, their pairwise products and squares, then q1, qk and log(1 + mass_t(B)), the one
definition that `budget_policy.Rounds` (replays) and `PredictedBudget` (the live round) both read.

`BudgetPredictor` is the shipped form of a ridge fit (`budget_policy.Predictor`, fitted on validation replays of
the pair on the machine): the budgets it chooses among, the features' standardization and the weights W of the
relative curve log TPS_t(B) - mean_B TPS = [1, (x_t - mu) / sd] W; B_t is the curve's argmax (`choose`). Its AR arm
(`ar`, where the replays had budget 0) is the plain AR step as one more choice, made before the draft, since an AR
step's round cost is a round without one: r_t = log TPS_t(0) - log TPS_t(B_t), predicted by a ridge fit on what the
round knows then (`before_draft`: the last draft's conf and degen, hist_t now, prefix_t), and the round is an AR
step where r_t > 0. It is a JSON file (`save`, `load`) that records the pair and hardware it was fitted for: another
pair, or another machine (whose round costs decide every B_t), is refused with the command that fits one there.

`PredictedBudget` is both the `TreeBuilder` and the `BudgetController` of `graft+pred` (as `CaDDTree` is of
`graft+stop`): no hand gate, the AR arm in their place (between AR steps, probe rounds at doubling intervals up to
`max_skip`, SABA's schedule `saba_extensions.ArGate`: an AR step changes nothing the arm reads but the prefix), the
heap built once at the largest of the predictor's budgets within the cap, the round's features read from that tree,
and the tree its first B_t pops; s_t is tracked over the calibration's window from its prior (`StateTracker`).
Invariants: the tree equals `heap.build(root, cand, B_t)`; the pool per depth is the predictor's largest budget, as
in its replays (qk is that pool's top-K mass): under a lower cap mass_t(B) and qk are ones the fit never saw.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graftlib.core.builders import Candidates, HeapTreeBuilder
from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR, portable
from graftlib.core.tree import Tree
from graftlib.methods.saba import StateTracker
from graftlib.methods.saba_extensions import ArGate
from graftlib.methods.saba_params import SabaParams

DEFAULT_PREDICTOR = ASSETS_DIR / "predictors" / "default.json"  # fitted on this pair's validation replays
# What fits one on a machine (`graft fit-predictor`, lab/run/predictor_fit): GRAFT's trajectory on validation
# prompts replayed over the grid with the AR step (budget 0), timed there; FIT_MINUTES as measured on a 2-core CPU
# (docs/budget-policies.md)
FIT_GRID = (0, 2, 4, 8, 12, 16, 24, 32)
FIT_PROMPTS = 10
FIT_COMMAND = (f"graft fit-predictor --replay-prompts {FIT_PROMPTS} --grid {','.join(map(str, FIT_GRID))} "
               "--out results/predictor.json")
FIT_MINUTES = 25


def round_features(cand: Candidates, tree: Tree, grid: list[int]) -> dict:
    """q1 and qk per depth of `cand` and mass_t(B) per budget B of `grid` over `tree`, the heap's tree at the grid's
    largest budget (module doc). Rounded to 4 decimals: records stay compact, and a decode reads what a replay
    recorded."""
    logq = np.asarray(cand.logq_table, dtype=np.float64)
    pops = np.cumsum(np.exp(np.asarray(tree.scores[1:], dtype=np.float64)))
    mass = [float(pops[min(b, len(pops)) - 1]) if b > 0 and len(pops) else 0.0 for b in grid]
    return {"q1": np.round(np.exp(logq[:, 0]), 4).tolist(), "qk": np.round(np.exp(logq).sum(axis=1), 4).tolist(),
            "mass": np.round(mass, 4).tolist()}


def features(state: np.ndarray, prefix: np.ndarray, extra: np.ndarray | None = None,
             mass: np.ndarray | None = None) -> np.ndarray:
    """x_t per round (module doc): `state` [N, >= 3] (s_t's conf, degen, hist), `prefix` [N], and where given
    `extra` [N, 2D] (q1 then qk per depth) and `mass` [N, K]; [N, F], no constant."""
    base = np.column_stack([state[:, 0], state[:, 1], state[:, 2], np.log(prefix)])
    i, j = np.triu_indices(base.shape[1])
    x = np.column_stack([base, base[:, i] * base[:, j]])
    return x if extra is None else np.column_stack([x, extra, np.log1p(mass)])


def before_draft(last: np.ndarray, hist: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """The AR arm's x_t per round: `features` of the last draft's conf and degen (`last` [N, >= 2]), hist_t now
    (`hist` [N]) and prefix_t (`prefix` [N]): what a round knows before it drafts; [N, 14]."""
    return features(np.column_stack([last[:, 0], last[:, 1], hist]), prefix)


def ridge_curves(x: np.ndarray, mu, sd, w) -> np.ndarray:
    """[1, (x - mu) / sd] @ w for features `x` [N, F]: a ridge fit's prediction, the one evaluation a fit
    (`budget_policy.Predictor`) and its shipped form share."""
    z = (x - np.asarray(mu)) / np.asarray(sd)
    return np.column_stack([np.ones(len(z)), z]) @ np.asarray(w)


@dataclass
class BudgetPredictor:
    """A ridge fit of the relative curve over `budgets` (module doc): x_t standardized by `mu`, `sd`, then
    [1, x] @ `w` ([F + 1, K]). `ar`: the AR arm's fit, {"mu", "sd", "w"} over `before_draft`'s features (None: the
    replays had no budget 0, and every round drafts). `meta`: what it was fitted on (pair, hardware, replays, setting,
    command)."""

    budgets: list[int]
    mu: list[float]
    sd: list[float]
    w: list[list[float]]
    meta: dict = field(default_factory=dict)
    ar: dict | None = None

    def __post_init__(self):
        require(len(self.budgets) >= 1 and all(b >= 1 for b in self.budgets) and self.budgets == sorted(self.budgets),
                "a budget predictor's budgets are positive and increasing")
        require(len(self.mu) == len(self.sd) == len(self.w) - 1 and all(len(r) == len(self.budgets) for r in self.w),
                "a budget predictor's mu, sd and w disagree in shape")
        require(self.ar is None or len(self.ar["mu"]) == len(self.ar["sd"]) == len(self.ar["w"]) - 1,
                "a budget predictor's AR arm: mu, sd and w disagree in shape")

    @property
    def id(self) -> str:
        body = json.dumps([self.budgets, self.mu, self.sd, self.w] + ([self.ar] if self.ar else []))
        return hashlib.sha256(body.encode()).hexdigest()[:12]

    def curves(self, x: np.ndarray) -> np.ndarray:
        """The predicted relative curve [N, K] for features `x` [N, F]."""
        require(x.shape[1] == len(self.mu), f"the round has {x.shape[1]} features, the predictor was fitted on "
                f"{len(self.mu)}: it was fitted for a drafter of another depth or a grid of other budgets")
        return ridge_curves(x, self.mu, self.sd, self.w)

    def choose(self, x: np.ndarray, cap: int | None = None) -> np.ndarray:
        """B_t per round: the curve's argmax over the budgets within `cap` (the smallest on ties)."""
        k = len(self.budgets) if cap is None else sum(b <= cap for b in self.budgets)
        require(k >= 1, f"no budget of the predictor's {self.budgets} is within the cap {cap}")
        return np.asarray(self.budgets)[self.curves(x)[:, :k].argmax(axis=1)]

    def ar_ratio(self, x0: np.ndarray) -> np.ndarray:
        """The AR arm's predicted r_t = log TPS_t(0) - log TPS_t(B_t) [N] on `before_draft` features `x0` [N, 14]."""
        require(self.ar is not None, "this budget predictor has no AR arm (its replays had no budget 0)")
        return ridge_curves(x0, self.ar["mu"], self.ar["sd"], self.ar["w"])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"budgets": self.budgets, "mu": self.mu, "sd": self.sd, "w": self.w, "meta": self.meta,
                **({"ar": self.ar} if self.ar else {})}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "BudgetPredictor":
        path = Path(path)
        require(path.is_file(), f"budget predictor {path} not found (make one with `graft fit-predictor`)")
        try:
            body = json.loads(path.read_text())
            ar = body.get("ar")
            out = cls(budgets=[int(b) for b in body["budgets"]], mu=body["mu"], sd=body["sd"], w=body["w"],
                      meta=body.get("meta", {}), ar=None if ar is None else {k: ar[k] for k in ("mu", "sd", "w")})
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise GraftError(f"budget predictor {path} is not a predictor file ({type(e).__name__}: {e})") from e
        out.meta = {**out.meta, "path": portable(path)}
        return out


class PredictedBudget:
    """`graft+pred`'s builder and controller (module doc): `predictor` chooses B_t among its budgets within `cap`
    on the heap `heap`, and where it has an AR arm whether the round drafts at all; `params` a SABA calibration,
    whose window and prior track s_t and whose `max_skip` bounds a run of AR steps."""

    def __init__(self, predictor: BudgetPredictor, heap: HeapTreeBuilder, params: SabaParams, cap: int,
                 name: str = "graft+pred"):
        require(isinstance(cap, int) and cap >= 1, f"{name} cap must be a positive integer, got {cap!r}")
        self.predictor = predictor
        self.grid = [b for b in predictor.budgets if b <= cap]
        require(self.grid, f"{name}: no budget of the predictor's {predictor.budgets} is within the cap {cap}")
        self.max_budget = self.grid[-1]
        self.heap, self.params, self.name = heap, params, name
        self.calibration = params.id
        self.reset()

    def reset(self) -> None:
        self.prefix_len = 0
        self.tracker = StateTracker(self.params.window, self.params.hist_prior)
        self.last_state: list[float] | None = None  # s_t of the last draft
        self.schedule = ArGate(self.params.max_skip)

    def speculate(self, prefix_len: int) -> bool:
        """The AR arm before the draft: False = this round is one plain AR step (never before a first draft)."""
        scheduled = self.schedule.pending()
        if scheduled is not None:
            return scheduled
        if self.predictor.ar is None or self.last_state is None:
            return True
        x0 = before_draft(np.array([self.last_state]), np.array([self.tracker.hist()]), np.array([float(prefix_len)]))
        return self.schedule.decide(bool(self.predictor.ar_ratio(x0)[0] > 0))

    def budget(self, cand: Candidates, prefix_len: int) -> int:
        """The grid's largest budget (the tree is cut in `build`); the round's s_t is read here."""
        self.prefix_len = prefix_len
        self.last_state = self.tracker.signal_list(cand)
        return self.max_budget

    def choose(self, cand: Candidates, full: Tree) -> int:
        """B_t for the round whose heap at the grid's largest budget is `full`."""
        f = round_features(cand, full, self.predictor.budgets)
        x = features(np.array([self.last_state]), np.array([float(self.prefix_len)]),
                     np.array([f["q1"] + f["qk"]]), np.array([f["mass"]]))
        return int(self.predictor.choose(x, self.max_budget)[0])

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        full = self.heap.build(root_token, cand, budget)
        return full.prefix(self.choose(cand, full))

    def feedback(self, record: dict) -> None:
        if record["budget"] > 0:  # hist_t is over drafted rounds
            self.tracker.feedback(record)
