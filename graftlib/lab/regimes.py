"""The workbook's two cost regimes, this machine's and the paper's, and the paper's items drawn in each.

At T = 0 a decode's rounds (trees, accepted lengths) do not depend on the machine; the seconds do,
and so do the decisions that read them (SABA's budget, CaDDTree's stopping, which fixed budget is
best). A `Regime` is what decides and prices the rounds:
  machine  the shipped CPU calibration and cost profile (`cost_profile.default_profile`); budgets of
           a CPU's order; every decode verified and timed: wall clock beside the modeled figure;
  paper    the paper's A100 round costs (`graftlib/assets/costs/paper-a100.json`, derived from its
           tables by `graftlib.lab.paper_costs`) and SABA's gain on the paper's grid under them
           (`graftlib/assets/saba/paper-a100.json`); budgets of the paper's order (DDTree 64-256,
           caps 512); the DFlash-drafted runs walked along AR's tokens (`graftlib.core.walked`:
           the verified decode's rounds without its verify), so the figures are modeled only.
`regime_runs` lists a regime's runs of Tables 1-2 (the chain, DDTree at the regime's budgets,
+TDES, +SABA, GRAFT, CaDDTree, EAGLE-3 / OPT-Tree at their releases' budgets), `regime_bench` runs
them, `regime_table` is the table of nodes, MAT and speedups beside the paper's GSM8K numbers, and
`claims_by_regime` the paper's throughput claims (`graftlib.lab.claims`) with a verdict per regime:
the machine's by wall clock and modeled, the paper regime's modeled only; `regime_budget_curve`
(Figure 1(c)) and `regime_oracle` (Figure 6) are the same-prefix replays in a regime (walked and
priced by its profile where it walks), and `figure_claims` their claims (the best budget differs
between easy and hard rounds; SABA retains the paper's 94.1% of the oracle) in the same shape. `needed_mat_line` (`paper_costs.mat_needed`) adds what MAT
GRAFT would need for the paper's speedup under the paper's costs.
"""

from dataclasses import dataclass

from graftlib.lab.bench import Run, run_bench
from graftlib.lab.claims import CLAIMS, POOLED, evaluate_claims
from graftlib.lab.metrics import summarize
from graftlib.lab.paper import FIGURE6, TABLE1, TABLE2
from graftlib.lab.paper_costs import MODEL, mat_needed
from graftlib.lab.tables import budget_curve
from graftlib.methods.cost_profile import PAPER_PROFILE, CostProfile, default_profile, with_costs
from graftlib.methods.registry import AR_METHODS, REGISTRY
from graftlib.methods.saba_params import PAPER_PATH, SabaParams, default_params
from graftlib.training.replay import oracle_rows, priced, records_of, replay_prompts, within_grid

LABELS = {"ar": "AR", "dflash": "DFlash", "ddtree": "DDTree", "ddtree+tdes": "+TDES", "ddtree+saba": "+SABA",
          "graft": "GRAFT", "caddtree": "CaDDTree", "eagle3": "EAGLE-3", "opt-tree": "OPT-Tree"}


@dataclass(frozen=True)
class Regime:
    name: str  # "machine" | "paper"
    label: str  # what a figure says of its numbers
    profile: CostProfile
    saba: SabaParams | None  # the adaptive methods' calibration, deciding under `profile` (None: the shipped one)
    budgets: tuple[int, ...]  # DDTree's fixed budgets; +TDES runs at the middle one
    cap: int  # +SABA, GRAFT and CaDDTree choose up to this
    chains: tuple[int, ...]  # the DFlash chain's drafts per round
    walk: bool  # DFlash-drafted runs walked (modeled only), not verified

    @property
    def budget(self) -> int:
        """The fixed budget of Table 2's DDTree and +TDES rows."""
        return self.budgets[len(self.budgets) // 2]


def machine(budgets=(4, 8, 16), cap: int = 64) -> Regime:
    return Regime("machine", "this machine: measured and modeled", default_profile(), None, tuple(budgets), cap,
                  (3, 15), False)


def paper(budgets=(64, 128, 256), cap: int = 512) -> Regime:
    profile = CostProfile.load(PAPER_PROFILE)
    return Regime("paper", "the paper's A100 costs: modeled", profile, with_costs(SabaParams.load(PAPER_PATH), profile),
                  tuple(budgets), cap, (15,), True)


def regime_runs(regime: Regime, ar_drafted: bool = True) -> list[Run]:
    """Tables 1-2's runs in `regime` (module doc); `ar_drafted=False` leaves EAGLE-3 / OPT-Tree out (a pair
    without an EAGLE-3 drafter)."""
    runs = [Run("ar", None), *(Run("dflash", c) for c in regime.chains), *(Run("ddtree", b) for b in regime.budgets),
            Run("ddtree+tdes", regime.budget), *(Run(m, regime.cap) for m in ("ddtree+saba", "graft", "caddtree"))]
    return runs + ([Run(m, REGISTRY[m].release_budget) for m in AR_METHODS] if ar_drafted else [])


def regime_bench(pair, regime: Regime, prompts: list, runs: list[Run], max_new_tokens: int, out,
                 progress: bool = False) -> list[dict]:
    """`run_bench` deciding and priced in `regime` (walked where the regime walks), keyed by the regime."""
    return run_bench(pair, prompts, runs, max_new_tokens, out, progress=progress, extra={"regime": regime.name},
                     cost_profile=regime.profile, saba=regime.saba, walk=regime.walk)


def regime_table(records: list[dict], regime: Regime, task: str = "gsm8k"):
    """Per run: nodes per round, MAT, the modeled speedup over AR (and, in a regime that verifies, the wall-clock one),
    beside the paper's Table 1 row on `task` (Qwen3-8B) and Table 2's mean nodes. A pandas DataFrame."""
    import pandas as pd

    rows = []
    for s in summarize(records):
        label = LABELS[s["method"]]
        paper_t1 = TABLE1[MODEL].get(label, {}).get(task)
        rows.append({"regime": regime.name, "run": s["key"], "method": label, "nodes/round": s["mean_nodes"],
                     "MAT": s["mat"], "speedup modeled": s["modeled_speedup"],
                     "speedup wall": None if regime.walk else s["speedup"],  # a walked regime is modeled only
                     "paper MAT": paper_t1[0] if paper_t1 else None,
                     "paper speedup": paper_t1[1] if paper_t1 else None,
                     "paper nodes": TABLE2[label][0] if label in TABLE2 else None})
    return pd.DataFrame(rows).set_index("run")


def needed_mat_line(records: list[dict], regime: Regime, task: str = "gsm8k") -> str:
    """One line: the MAT GRAFT would need for the paper's speedup on `task` under `regime`'s costs at its
    own mean nodes per round, beside the MAT it has."""
    row = next((s for s in summarize(records) if s["method"] == "graft"), None)
    if row is None:
        return "no GRAFT run: no MAT needed computed"
    target = TABLE1[MODEL]["GRAFT"][task][1]
    need = mat_needed(regime.profile, target, row["mean_nodes"])
    return (f"GRAFT under {regime.profile.name} at its {row['mean_nodes']:.1f} nodes a round needs MAT {need:.2f} for "
            f"the paper's {target:.2f}x on {task} (the paper's MAT {TABLE1[MODEL]['GRAFT'][task][0]:.2f}); "
            f"the embedded pair has {row['mat']:.2f} ({row['modeled_speedup']:.2f}x modeled)")


def claims_by_regime(records: dict[str, list[dict]], regimes: dict[str, Regime]):
    """C1-C9 pooled over the tasks, one verdict column per regime and figure: the machine's by wall clock
    and modeled, a walked regime's modeled only. A pandas DataFrame indexed by claim."""
    import pandas as pd

    table = {c.id: {"source": c.source, "paper": c.paper} for c in CLAIMS}
    for name, recs in records.items():
        regime = regimes[name]
        rows = [r for r in evaluate_claims(recs, regime.budget, regime.cap) if r["task"] == POOLED]
        figures = ("modeled",) if regime.walk else ("wall-clock", "modeled")
        for r in rows:
            for figure in figures:
                ratio = r.get(f"ratio {figure}")
                cell = r[f"verdict {figure}"] if ratio is None else f"{r[f'verdict {figure}']} ({ratio:.3f}x)"
                table[r["claim"]][f"{name} {figure}"] = cell
    return pd.DataFrame.from_dict(table, orient="index")


def regime_budget_curve(pair, regime: Regime, items: list, max_new_tokens: int, grid: list[int], out):
    """Figure 1(c) in `regime`: a DDTree@`regime.budget` trajectory replayed over `grid` (walked and priced
    by the regime's profile where it walks, `replay.WalkReplay`), as `tables.budget_curve`."""
    lines = replay_prompts(pair, "ddtree", regime.budget, grid, items, max_new_tokens, out,
                           profile=regime.profile if regime.walk else None)
    return budget_curve(records_of(lines), grid, regime.profile)


def regime_oracle(pair, regime: Regime, items: list, max_new_tokens: int, grid: list[int], out) -> dict[str, list]:
    """Figure 6 in `regime`: GRAFT's trajectory (capped at the grid's largest budget) replayed over `grid`,
    SABA choosing within it (`replay.within_grid`). {figure: per-round oracle rows (`replay.oracle_rows`)}:
    "modeled" (the records priced by the regime's profile) and, where the regime verifies, "wall-clock"
    (the measured latencies)."""
    params = within_grid(regime.saba or default_params(), grid)
    lines = replay_prompts(pair, "graft", max(grid), grid, items, max_new_tokens, out, params,
                           profile=regime.profile if regime.walk else None)
    records = records_of(lines)
    rows = {"modeled": oracle_rows(priced(records, regime.profile))}
    return rows if regime.walk else {"wall-clock": oracle_rows(records), **rows}


FIGURE_CLAIMS = {"F1c": ("Figure 1(c)", "the throughput-optimal budget differs between easy and hard rounds"),
                 "F6": ("Figure 6", f"SABA retains {FIGURE6['mean_retained']:.1%} of the same-prefix oracle's throughput")}


def figure_claims(curves: dict, oracles: dict[str, dict[str, list]], regimes: dict[str, Regime]):
    """Figure 1(c)'s and Figure 6's claims per regime and figure, as rows shaped like `claims_by_regime`'s:
    F1c holds where the best budget of the easy third of the rounds differs from the hard third's (`curves`:
    `tables.budget_curve` per regime), F6 where SABA's mean retained oracle throughput reaches the paper's
    (`oracles`: `regime_oracle` per regime)."""
    import pandas as pd

    table = {k: {"source": src, "paper": words} for k, (src, words) in FIGURE_CLAIMS.items()}
    for name, curve in curves.items():
        for figure, column in (("wall-clock", "tps"), ("modeled", "m_tps")):
            if regimes[name].walk and figure == "wall-clock":
                continue
            best = curve[column].groupby(level=0, observed=True).idxmax().map(lambda x: x[1])
            easy, hard = best.get("easy"), best.get("hard")
            table["F1c"][f"{name} {figure}"] = (f"{'holds' if easy != hard else 'fails'} (easy B={easy}, "
                                                f"hard B={hard})")
    for name, by_figure in oracles.items():
        for figure, rows in by_figure.items():
            mean = sum(r["retained"] for r in rows) / len(rows) if rows else float("nan")
            verdict = "holds" if mean >= FIGURE6["mean_retained"] else "fails"
            table["F6"][f"{name} {figure}"] = f"{verdict} ({mean:.1%})"
    return pd.DataFrame.from_dict(table, orient="index")
