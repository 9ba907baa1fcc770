"""SABA across sampling temperatures: does a T = 0 calibration still track the oracle at T > 0?

A SABA calibration (`graft calibrate`) is fitted on greedy replay. At T > 0 the verdict at a node
is a draw (`graftlib.core.sampling`): for the same draft state s_t fewer drafts match and the
outcome varies more, so E[a_t(B) | s_t] moves and with it the budget SABA should choose. This
module measures what a greedy fit loses there against a fit on replay at the same temperature.

Protocol, per temperature T (`temperature_tracking`):
- fit split: validation prompts (`data.pool("val")`, the calibration's own split) replayed at T
  with a ddtree@ref_budget reference trajectory over the grid plus one AR step
  (`replay.replay_prompts`: each prompt seeded as in `graft bench`, one line per prompt keyed by
  its setting, so a re-run reuses it), then `calibrate.fit_params` on them: what `graft calibrate
  --temperature T` fits, on the same kind of data;
- held-out split: evaluation prompts, which no fit sees, replayed the same way at T;
- score (`retained_oracle`): per fit, the retained oracle throughput of the budgets it would choose
  on the held-out rounds (`calibrate.offline_tracking`: measured a_t(B) / l_t(B), its gates and its
  online gain correction) within the replayed grid (`replay.within_grid`). Every fit is scored on
  the same rounds (paired), so a difference between fits is the calibration's, not the prompts'.
Fits scored at each T: the given ones (the shipped T = 0 calibration, say), the fit at T on the fit
split and, when T = 0 is among the temperatures, the fit at T = 0 on the fit split: the same
prompts and amount of data as the fit at T, so only the temperature differs (at T = 0 both rows
are that one fit). The best fixed budget chosen after the fact (`replay.fixed_budget_retained`)
is the state-blind reference. The replays use the builtin state prior (window 8, hist prior 2.0),
as `graft calibrate` does.
"""

from dataclasses import dataclass

from graftlib.core.errors import require
from graftlib.core.sampling import Sampling
from graftlib.methods.registry import MethodInputs
from graftlib.methods.saba_params import SabaParams
from graftlib.training.graft.calibrate import fit_params, offline_tracking
from graftlib.training.graft.replay import (
    ReplayRecord,
    ReplaySpec,
    fixed_budget_retained,
    records_of,
    replay_prompts,
    within_grid,
)
from graftlib.training.graft.saba_fit import calibration_meta

FIT_AT_ZERO = "fit at T = 0 (fit split)"
FIT_AT_T = "fit at this T (fit split)"
BEST_FIXED = "best fixed budget (after the fact)"


@dataclass(frozen=True)
class TrackingConfig:
    """What is replayed: the SABA grid (positive budgets; the AR step is always added), the reference
    trajectory's budget, lengths and timing repeats (medians)."""

    grid: tuple[int, ...]
    ref_budget: int = 8
    max_new_tokens: int = 64
    max_prompt_tokens: int = 384
    repeats: int = 1

    def __post_init__(self):
        require(len(self.grid) > 0 and all(isinstance(b, int) and b >= 1 for b in self.grid),
                f"tracking grid must be budgets >= 1 (the AR step is added), got {list(self.grid)}")
        require(self.ref_budget >= 1 and self.max_new_tokens >= 1 and self.repeats >= 1,
                "ref_budget, max_new_tokens and repeats must be >= 1")


def retained_oracle(params: SabaParams, records: list[ReplayRecord], depth: int | None = None) -> dict:
    """Retained oracle throughput of `params`' choices on replay records (`offline_tracking`), SABA
    choosing within the records' grid: its positive budgets, its AR gates only when budget 0 was
    replayed. 1.0 when every choice is the round's best budget."""
    grid = sorted({r.budget for r in records if not r.reference})
    require(len(grid) > 0, "no replayed rounds to score")
    return offline_tracking(within_grid(params, grid), records, depth)


def replayed(pair, items: list, sampling: Sampling, cfg: TrackingConfig, out) -> list[ReplayRecord]:
    """Replay records of `items` at `sampling` (resumable lines in `out`, keyed by their setting)."""
    spec = ReplaySpec((0, *cfg.grid), cfg.max_new_tokens, cfg.repeats, sampling,
                      max_prompt_tokens=cfg.max_prompt_tokens)
    lines = replay_prompts(pair, "ddtree", cfg.ref_budget, items, out, spec, MethodInputs(saba=SabaParams()))
    return records_of(lines)


def fit_at(pair, records: list[ReplayRecord], sampling: Sampling, cfg: TrackingConfig, n_prompts: int) -> SabaParams:
    """SABA fitted on replay records measured at `sampling` (meta records it, as `graft calibrate` does)."""
    meta = calibration_meta(pair.describe(), source="graftlib.training.graft.temperature_tracking", grid=list(cfg.grid),
                            val_prompts=n_prompts, ref_budget=cfg.ref_budget, max_new_tokens=cfg.max_new_tokens,
                            **sampling.setting())
    return fit_params(records, list(cfg.grid), pair.drafter.block_size - 1, meta=meta)


def temperature_tracking(pair, samplings: list[Sampling], fit_items: list, eval_items: list, cfg: TrackingConfig,
                         out, given: dict[str, SabaParams] | None = None,
                         log=None) -> tuple[list[dict], dict[float, SabaParams]]:
    """The protocol of the module doc. Returns one row per (temperature, fit), with the fit's
    calibration id and `retained_oracle`'s numbers, plus a row per temperature for the best fixed
    budget; and the fits made here by temperature."""
    require(len(samplings) > 0 and len(fit_items) > 0 and len(eval_items) > 0,
            "temperature tracking needs temperatures, fit prompts and held-out prompts")
    require(len({s.temperature for s in samplings}) == len(samplings), "temperature tracking: a temperature twice")
    depth = pair.drafter.block_size - 1
    fits: dict[float, SabaParams] = {}
    rows = []
    for s in sorted(samplings, key=lambda x: x.temperature):  # T = 0 first: its fit is scored at every T
        fits[s.temperature] = fit_at(pair, replayed(pair, fit_items, s, cfg, out), s, cfg, len(fit_items))
        held = replayed(pair, eval_items, s, cfg, out)
        scored = dict(given or {})
        if 0.0 in fits:
            scored[FIT_AT_ZERO] = fits[0.0]
        scored[FIT_AT_T] = fits[s.temperature]
        for name, params in scored.items():
            rows.append(dict(temperature=s.temperature, fit=name, calibration=params.id,
                             **retained_oracle(params, held, depth)))
        fixed = fixed_budget_retained(held)
        best = max(fixed, key=fixed.get)
        rows.append(dict(temperature=s.temperature, fit=BEST_FIXED, calibration=f"B = {best}",
                         rounds=rows[-1]["rounds"], mean_retained=fixed[best]))
        if log:
            log(f"T = {s.temperature:g}: " + ", ".join(f"{r['fit']}: {r['mean_retained']:.3f}"
                                                      for r in rows if r["temperature"] == s.temperature))
    return rows, fits
