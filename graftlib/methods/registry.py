"""The method registry: a decoding method's name -> its tree builder and budget controller.

The decode loop (`graftlib.core.decode`) runs any `TreeBuilder` with any `BudgetController`; a
method is a named pair of them, built here from one row of `REGISTRY`:
  ar           no draft, no tree: greedy AR with a KV cache (the denominator of every speedup)
  dflash       the drafter's chain, `budget` drafts per round (at most block_size - 1)
  ddtree       best-first heap tree of `budget` nodes (DDTree)
  ddtree+tdes  the same heap ranked by log q + beta * TDES (eq. 13; `graftlib.methods.tdes`)
  ddtree+saba  the heap, SABA choosing each round's budget up to `budget` (`graftlib.methods.saba`)
  graft        TDES + SABA
  caddtree     cost-aware stopping: the heap sizes itself (`graftlib.methods.caddtree`)
  graft+stop   GRAFT with SABA's budget choice replaced by that stop on its own TDES-ranked heap (SABA's AR gates kept)
  graft+pred   a fitted predictor's choice on that heap, the AR step one of its arms (`methods.budget_predictor`)
  dflash2      DFlash 2's chain: its pairwise selector's walk, `budget` drafts (`graftlib.methods.selector`)
  ddtree+sel   the heap with each parent's pool reweighted by the selector's transition score
  ddtree+tdes+sel  the same with TDES on top (eq. 13 over the reweighted log q)
  eagle3       an EAGLE-3 drafter grows EAGLE-2's dynamic tree, `budget` nodes kept (`eagle_tree`)
  opt-tree     the same drafter grows OPT-Tree's tree of `budget` nodes (`opt_tree`)
A new method is one factory and one row. Its flags: `tdes` (a TDES scorer and the target's embeddings),
`selector` (a DFlash 2 drafter's selector, `Selector.of(drafter)`), `adaptive` (the budget caps a per-round choice
made with a SABA calibration), `predicted` (a budget predictor, `MethodInputs.predictor`), `policy` (AR-drafted:
the tree policy of `graftlib.core.ar_drafting`, with `release_budget` its release's budget). `MethodInputs.setting`
names those inputs in every result's setting; given the pair and hardware at hand, a method checks the scorer,
calibration and predictor it loads against the ones they were fitted for
(`graftlib.inputs.artifacts`): another pair's is refused.
"""

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch

from graftlib.core.builders import BudgetController, ChainBuilder, FixedBudget, HeapTreeBuilder, TreeBuilder
from graftlib.core.errors import require
from graftlib.core.paths import portable
from graftlib.methods.budget_predictor import DEFAULT_PREDICTOR, BudgetPredictor, PredictedBudget
from graftlib.methods.caddtree import CaDDTree
from graftlib.methods.eagle_tree import RELEASE_BUDGET as EAGLE_RELEASE_BUDGET
from graftlib.methods.eagle_tree import EagleTree
from graftlib.methods.fitted import check_calibration, check_predictor, check_scorer
from graftlib.methods.opt_tree import RELEASE_BUDGET as OPT_RELEASE_BUDGET
from graftlib.methods.opt_tree import OptTree
from graftlib.methods.saba import SabaController
from graftlib.methods.saba_params import SabaParams, default_params
from graftlib.methods.selector import Selector, SelectorChain
from graftlib.methods.tdes import default_scorer_path, load_scorer, scorer_config, scorer_id
from graftlib.models.pair import PairId

MAX_BUDGET = 4096
Parts = tuple[TreeBuilder | None, BudgetController | None]


@dataclass(frozen=True)
class MethodInputs:
    """What every run of a bench or a replay shares beyond its method and budget: the TDES scorer path and beta
    of `ddtree+tdes` and `graft`, the SABA calibration of the adaptive methods, the budget predictor file of
    `graft+pred` (None each: the shipped ones)."""

    tdes: str | None = None
    beta: float | None = None
    saba: SabaParams | None = None
    predictor: str | None = None

    def budget_predictor(self) -> BudgetPredictor:
        """`graft+pred`'s predictor: the file given, else the shipped one."""
        return BudgetPredictor.load(self.predictor or DEFAULT_PREDICTOR)

    def setting(self, methods: Iterable[str], eagle3: dict | None = None) -> dict:
        """What results of these methods depend on beyond the pair: the TDES scorer (path, weights id) and beta, the
        SABA calibration (its id and file; the shipped one where `saba` is None) of adaptive methods, and for
        AR-drafted ones their tree policies' settings and the EAGLE-3 drafter (`eagle3`: `Pair.eagle3_describe()`).
        Goes into the setting (and its id); paths are portable (`core.paths.portable`)."""
        methods = set(methods)
        out: dict = {}
        if methods & set(TDES_METHODS):
            path = self.tdes or default_scorer_path()
            config = scorer_config(path)
            out.update(tdes=portable(path), tdes_id=scorer_id(path), tdes_tasks=config.get("tasks", "all"),
                       beta=config["beta"] if self.beta is None else self.beta)
        if methods & set(ADAPTIVE_METHODS):
            params = self.saba or default_params()
            out.update(saba=params.id, saba_calibration=params.meta.get("path", "builtin"))
        if methods & set(PREDICTED_METHODS):
            predictor = self.budget_predictor()
            out.update(predictor=predictor.meta["path"], predictor_id=predictor.id)
        ar = sorted(methods & set(AR_METHODS))
        if ar:
            out.update(ar_trees={m: asdict(REGISTRY[m].policy) for m in ar}, **(eagle3 or {}))
        return out


SHIPPED_INPUTS = MethodInputs()  # the shipped scorer, its beta and the shipped calibration


@dataclass(frozen=True)
class MethodArgs:
    """What a method's factory may use: the budget (or cap), the drafter's block size, the run's `inputs` (TDES
    scorer path and beta, SABA calibration; None each: the shipped ones), the target's embeddings, and the pair and
    hardware the scorer and calibration are checked against (None: not checked)."""

    budget: int
    block_size: int
    inputs: MethodInputs = SHIPPED_INPUTS
    embed: torch.Tensor | None = None
    pair: PairId | None = None
    hardware: str = ""
    selector: Selector | None = None

    def scorer_builder(self, method: str, selector: Selector | None = None) -> HeapTreeBuilder:
        """The heap ranked by a TDES scorer (eq. 13) over the target's embeddings (over the selector's
        reweighted log q when `selector` is given)."""
        require(self.embed is not None, f"{method} needs the target's embeddings (embed=) for its TDES scorer")
        if self.pair is not None:
            check_scorer(self.inputs.tdes or default_scorer_path(), self.pair, self.hardware)
        builder = load_scorer(self.inputs.tdes, self.embed, self.inputs.beta).builder(self.block_size - 1)
        builder.selector = selector
        return builder

    def need_selector(self, method: str) -> Selector:
        require(self.selector is not None, f"{method} needs a DFlash 2 drafter with a candidate selector "
                "(selector_rank in its config's dflash_config)")
        return self.selector

    def budget_predictor(self) -> BudgetPredictor:
        predictor = self.inputs.budget_predictor()
        if self.pair is not None:
            check_predictor(predictor, self.pair, self.hardware)
        return predictor

    def calibration(self) -> SabaParams:
        params = self.inputs.saba or default_params()
        if self.pair is not None:
            check_calibration(params, self.pair, self.hardware)
        return params


@dataclass(frozen=True)
class Method:
    name: str
    label: str  # what tables and figures call it (the paper's name where the paper has one)
    parts: Callable[[MethodArgs], Parts]
    tdes: bool = False  # the heap is ranked by a TDES scorer
    selector: bool = False  # a DFlash 2 drafter's selector ranks the chain or the heap
    adaptive: bool = False  # `budget` caps a per-round choice (a SABA calibration)
    predicted: bool = False  # a fitted budget predictor chooses the round's budget
    policy: EagleTree | OptTree | None = None  # AR-drafted: the tree policy (an EAGLE-3 drafter grows the tree)
    release_budget: int | None = None  # AR-drafted: the budget of the release's settings (Table 1)


def _chain(a: MethodArgs) -> Parts:
    require(a.budget <= a.block_size - 1, f"dflash budget {a.budget} too large: the chain has at most "
            f"block_size - 1 = {a.block_size - 1} drafts")
    return ChainBuilder(), FixedBudget(a.budget)


def _selector_chain(a: MethodArgs) -> Parts:
    require(a.budget <= a.block_size - 1, f"dflash2 budget {a.budget} too large: the chain has at most "
            f"block_size - 1 = {a.block_size - 1} drafts")
    return SelectorChain(a.need_selector("dflash2")), FixedBudget(a.budget)


def _stop(a: MethodArgs, heap: HeapTreeBuilder | None = None, gated: bool = False, name: str = "caddtree") -> Parts:
    rule = CaDDTree.from_params(a.calibration(), cap=a.budget, heap=heap, gated=gated, name=name)  # stops at its peak
    return rule, rule


def _predicted(a: MethodArgs) -> Parts:
    params = a.calibration()
    rule = PredictedBudget(a.budget_predictor(), a.scorer_builder("graft+pred"), params, cap=a.budget)
    return rule, rule


def _ar(name: str, label: str, policy: EagleTree | OptTree, release_budget: int) -> Method:
    return Method(name, label, lambda a: (policy, FixedBudget(a.budget)), policy=policy,
                  release_budget=release_budget)


REGISTRY: dict[str, Method] = {m.name: m for m in (
    Method("ar", "AR", lambda a: (None, None)),
    Method("dflash", "DFlash", _chain),
    Method("ddtree", "DDTree", lambda a: (HeapTreeBuilder(), FixedBudget(a.budget))),
    Method("ddtree+tdes", "+TDES", lambda a: (a.scorer_builder("ddtree+tdes"), FixedBudget(a.budget)), tdes=True),
    Method("ddtree+saba", "+SABA", lambda a: (HeapTreeBuilder(), SabaController(a.calibration(), cap=a.budget)),
           adaptive=True),
    Method("graft", "GRAFT", lambda a: (a.scorer_builder("graft"), SabaController(a.calibration(), cap=a.budget)),
           tdes=True, adaptive=True),
    Method("caddtree", "CaDDTree", _stop, adaptive=True),
    Method("graft+stop", "GRAFT+stop",
           lambda a: _stop(a, a.scorer_builder("graft+stop"), gated=True, name="graft+stop"), tdes=True, adaptive=True),
    Method("graft+pred", "GRAFT+pred", _predicted, tdes=True, adaptive=True, predicted=True),
    Method("dflash2", "DFlash 2", _selector_chain, selector=True),
    Method("ddtree+sel", "+selector",
           lambda a: (HeapTreeBuilder(name="ddtree+sel", selector=a.need_selector("ddtree+sel")),
                      FixedBudget(a.budget)), selector=True),
    Method("ddtree+tdes+sel", "+TDES+selector",
           lambda a: (a.scorer_builder("ddtree+tdes+sel", a.need_selector("ddtree+tdes+sel")), FixedBudget(a.budget)),
           tdes=True, selector=True),
    _ar("eagle3", "EAGLE-3", EagleTree(), EAGLE_RELEASE_BUDGET),
    _ar("opt-tree", "OPT-Tree", OptTree(), OPT_RELEASE_BUDGET),
)}
METHODS = tuple(REGISTRY)
LABELS = {m.name: m.label for m in REGISTRY.values()}  # the one place a method's printed name lives
TDES_METHODS = tuple(m.name for m in REGISTRY.values() if m.tdes)  # heap ranked by log q + beta * f~
ADAPTIVE_METHODS = tuple(m.name for m in REGISTRY.values() if m.adaptive)  # budget = cap on a per-round choice
AR_METHODS = tuple(m.name for m in REGISTRY.values() if m.policy is not None)  # an EAGLE-3 drafter grows the tree
AR_LABELS = {m: LABELS[m] for m in AR_METHODS}  # the AR-drafted baselines by the paper's names
PREDICTED_METHODS = tuple(m.name for m in REGISTRY.values() if m.predicted)  # a fitted predictor picks B_t
SELECTOR_METHODS = tuple(m.name for m in REGISTRY.values() if m.selector)  # a DFlash 2 drafter's selector ranks
CHAIN_METHODS = ("dflash", "dflash2")  # `budget` = drafts per round, at most block_size - 1
FITTED_METHODS = TDES_METHODS + tuple(m for m in ADAPTIVE_METHODS if m not in TDES_METHODS)  # load artifacts


def make_parts(method: str, budget: int, block_size: int, *, inputs: MethodInputs = SHIPPED_INPUTS,
               embed: torch.Tensor | None = None, pair: PairId | None = None, hardware: str = "",
               selector: Selector | None = None) -> Parts:
    """(tree builder, budget controller) of a method. `budget` is the fixed node budget, or the cap of an adaptive
    method's grid; `inputs` the run's TDES scorer and beta (`ddtree+tdes`, `graft`; default: the shipped scorer,
    `graftlib.methods.tdes.default_scorer_path()`) and SABA calibration (`ddtree+saba`, `graft`, `caddtree`;
    default: `graftlib.methods.saba_params.default_params()`); `embed` the target's input embeddings [V, E] (TDES's
    tables); `pair` / `hardware` what the scorer and calibration must have been fitted for
    (`graftlib.inputs.artifacts`; None: no check); `selector` a DFlash 2 drafter's (`Selector.of`) for
    `SELECTOR_METHODS`."""
    require(method in REGISTRY, f"unknown method {method!r}: choose from {', '.join(METHODS)}")
    beta = inputs.beta
    require(beta is None or 0 <= beta <= 10, f"beta must be in [0, 10], got {beta}")
    if method != "ar":
        require(isinstance(budget, int) and budget >= 1, f"budget must be a positive integer, got {budget!r}")
    if method not in ("ar", *CHAIN_METHODS):
        require(budget <= MAX_BUDGET, f"budget {budget} too large: at most {MAX_BUDGET} nodes per tree")
    return REGISTRY[method].parts(MethodArgs(budget, block_size, inputs=inputs, embed=embed, pair=pair,
                                             hardware=hardware, selector=selector))

