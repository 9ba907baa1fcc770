"""Modeled throughput of bench records: pricing, the ranking rule, and its validation.

Every bench record carries, beside its wall clock, the modeled time of its rounds under a cost profile
(`graftlib.inputs.cost_profile`): `modeled_s`, `modeled_tokens_per_s` (same tokens as the wall-clock
figure) and `cost_profile`. Its `round_shapes` and per-round `accepted` let `reprice` price the same rounds
under another profile without decoding. The profile is not part of the setting: pricing never changes a
setting id.

Ranking rule (`rank`): two runs a, b are compared on the prompts both decoded.
The wall-clock ratio TPS_b / TPS_a (pooled, paired per prompt, `metrics.pooled_speedup`) ranks
them when its bootstrap interval (`metrics.speedup_ci`) excludes 1.0; when the interval contains
1.0, or there are fewer than 3 prompts and no interval, wall clock cannot tell them apart on this
machine and the deterministic modeled ratio ranks them. `Ranking.caption` says which and why.

Several runs (`order_runs`) are ordered by how many of the others each beats under `rank`, then by modeled
and wall-clock TPS; `best_run` picks a method's best budget after the fact by a named figure, and a best at the
edge of the budgets searched (`at_edge`) is no best: its comparison is `EDGE` (not tested); `validate` tables the
modeled speedup beside wall clock, with the mean absolute error.

Details: docs/internals.md, `graftlib.lab.report.modeled`.
"""

import math
from collections import defaultdict
from dataclasses import dataclass

from graftlib.core.errors import require
from graftlib.inputs.cost_profile import CostProfile, RoundShape
from graftlib.lab.report.metrics import by_task, decoded_tokens, pooled_speedup, speedup_ci, summarize
from graftlib.lab.report.multiturn import turn_entries
from graftlib.methods.registry import AR_METHODS

AR_LIKE = ("ar", "hf")
FIGURES = ("wall-clock", "modeled", "rule")  # what picks a best run: one figure, or the ranking rule
EDGE = "not tested (best budget at the grid's edge)"  # a verdict against a best budget its grid does not bracket
EDGE_NOTE = "best budget at the grid's edge"


def price(rec: dict, profile: CostProfile) -> dict:
    """The modeled fields of one bench record under `profile` (module doc)."""
    require("new_tokens" in rec and "prompt_tokens" in rec,
            f"record {rec.get('uid')}/{rec.get('key')} has no new_tokens/prompt_tokens: not a bench record")
    if rec["method"] in AR_LIKE:
        seconds = math.fsum(profile.ar_modeled_seconds(t["prompt_tokens"], t["new_tokens"]) for t in turn_entries(rec))
    elif rec.get("round_shapes") is not None:
        shapes = RoundShape.from_record(rec)  # with each drafted round's rows (its `accepted`)
        unpriceable = rec["method"] in AR_METHODS and any(s.drafted and not s.ar_drafted for s in shapes)
        seconds = None if unpriceable else profile.modeled_seconds(shapes)  # unpriceable: no drafter forwards
    else:
        seconds = None
    tps = decoded_tokens(rec) / seconds if seconds else None
    return {"modeled_s": seconds, "modeled_tokens_per_s": tps, "cost_profile": profile.label}


def profile_labels(records: list[dict]) -> list[str]:
    """The "name id" of every cost profile that priced `records`, sorted."""
    return sorted({r["cost_profile"]["name"] + " " + r["cost_profile"]["id"] for r in records if r.get("cost_profile")})


def reprice(records: list[dict], profile: CostProfile) -> list[dict]:
    """Copies of `records` priced under `profile` (their rounds as decoded, this profile's costs)."""
    return [{**r, **price(r, profile)} for r in records]


@dataclass(frozen=True)
class Ranking:
    """How two runs compare, and by which figure (module doc, ranking rule)."""

    a: str
    b: str
    figure: str  # "modeled" or "wall-clock"
    wall_ratio: float  # TPS_b / TPS_a, wall clock, pooled over the paired prompts
    wall_ci: tuple[float, float] | None
    modeled_ratio: float  # the same ratio from the modeled times (nan if a record has none)
    profile: str  # the cost profile's name and id
    prompts: int
    modeled_ci: tuple[float, float] | None = None  # the modeled ratio's bootstrap interval over the prompts

    @property
    def ratio(self) -> float:
        return self.modeled_ratio if self.figure == "modeled" else self.wall_ratio

    @property
    def faster(self) -> str | None:
        """The faster run by the ranking figure (None on an exact tie)."""
        return None if self.ratio == 1.0 else self.b if self.ratio > 1.0 else self.a

    def caption(self) -> str:
        ci = ("no interval (< 3 prompts)" if self.wall_ci is None
              else f"95% CI {self.wall_ci[0]:.3f}-{self.wall_ci[1]:.3f}")
        if self.wall_ci is not None:
            ci += ", contains 1.0" if self.wall_ci[0] <= 1.0 <= self.wall_ci[1] else ", excludes 1.0"
        modeled = "no modeled figure" if math.isnan(self.modeled_ratio) else f"modeled {self.modeled_ratio:.3f}x"
        verdict = "a tie" if self.faster is None else f"{self.faster} is faster"
        return (f"{self.b} vs {self.a} over {self.prompts} prompts: wall-clock {self.wall_ratio:.3f}x ({ci}), "
                f"{modeled} (cost profile {self.profile}); ranked by the {self.figure} figure: {verdict}")


def rank(records: list[dict], a: str, b: str) -> Ranking:
    """Compare run keys `a` and `b` over the prompts both decoded (module doc, ranking rule)."""
    by_key: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in records:
        by_key[r["key"]][r["uid"]] = r
    paired = [(by_key[a][u], by_key[b][u]) for u in by_key[a] if u in by_key[b]]
    require(len(paired) > 0, f"no prompt was decoded by both {a!r} and {b!r}")
    wall, ci = pooled_speedup(paired), speedup_ci(paired)
    if math.isnan(wall):  # walked records carry no wall clock: the modeled figure decides
        ci = None
    priced = all(x.get("modeled_s") is not None for pair in paired for x in pair)
    modeled = pooled_speedup(paired, "modeled_s") if priced else math.nan
    modeled_ci = speedup_ci(paired, time="modeled_s") if priced else None
    inside = ci is None or ci[0] <= 1.0 <= ci[1]
    figure = "modeled" if inside and priced else "wall-clock"
    labels = profile_labels([x for pair in paired for x in pair])
    return Ranking(a, b, figure, wall, ci, modeled, ", ".join(labels) or "none", len(paired), modeled_ci)


@dataclass(frozen=True)
class Order:
    """Several runs ordered by the ranking rule (module doc): `keys` fastest first, `pairs` every comparison."""

    keys: tuple[str, ...]
    pairs: tuple[Ranking, ...]

    def position(self, key: str) -> int:
        """1 for the fastest run."""
        return self.keys.index(key) + 1

    def decided_by(self, figure: str) -> int:
        return sum(p.figure == figure for p in self.pairs)

    def caption(self) -> str:
        return rule_caption(self.pairs)


def rule_caption(pairs) -> str:
    """The cost profile, the ranking rule in words and how many of `pairs` (`Ranking`s) each figure decided."""
    profiles = sorted({p.profile for p in pairs}) or ["none"]
    wall = sum(p.figure == "wall-clock" for p in pairs)
    return (f"cost profile {', '.join(profiles)} | rank (and best budgets): by wall-clock tokens/s where the paired "
            f"95% bootstrap interval of two runs' ratio excludes 1.0, else by the modeled figure; {wall} of "
            f"{len(pairs)} pairs ranked by wall clock, {len(pairs) - wall} by the model")


def order_runs(records: list[dict], keys: list[str]) -> Order:
    """Order run keys `keys` by the ranking rule over `records` (module doc)."""
    require(len(keys) == len(set(keys)) and len(keys) > 0, f"order_runs needs distinct run keys, got {keys}")
    pairs = tuple(rank(records, a, b) for i, a in enumerate(keys) for b in keys[i + 1:])
    wins = dict.fromkeys(keys, 0.0)
    for p in pairs:
        if p.faster is None:
            wins[p.a] += 0.5
            wins[p.b] += 0.5
        else:
            wins[p.faster] += 1.0

    def tie_break(k):
        modeled = pooled_tps(records, k, "modeled_s")
        return -wins[k], math.inf if math.isnan(modeled) else -modeled, -pooled_tps(records, k), keys.index(k)

    return Order(tuple(sorted(keys, key=tie_break)), pairs)


def pooled_tps(records: list[dict], key: str, time: str = "decode_s") -> float:
    """Tokens/s of run `key` pooled over its records by the time field `time`; nan if a record has none."""
    recs = [r for r in records if r["key"] == key]
    require(len(recs) > 0, f"no records of run {key!r}")
    if any(r.get(time) is None for r in recs):
        return math.nan
    seconds = math.fsum(r[time] for r in recs)
    return sum(r["new_tokens"] - 1 for r in recs) / seconds if seconds else math.nan


def best_run(records: list[dict], keys: list[str], figure: str) -> str:
    """The fastest of `keys` after the fact: by wall-clock or modeled tokens/s, or first by the ranking rule."""
    require(figure in FIGURES, f"unknown figure {figure!r}: choose from {', '.join(FIGURES)}")
    if figure == "rule":
        return order_runs(records, keys).keys[0]
    time = "decode_s" if figure == "wall-clock" else "modeled_s"
    tps = {k: pooled_tps(records, k, time) for k in keys}
    return max(keys, key=lambda k: -math.inf if math.isnan(tps[k]) else tps[k])


def budget_of(key: str) -> int | None:
    """The budget of a run key ("ddtree@64" -> 64; None without one)."""
    _, at, b = key.partition("@")
    return int(b) if at and b.isdigit() else None


def at_edge(best, grid) -> bool:
    """Whether the budget `best`, chosen from `grid`, lies at its smallest or largest budget: the grid does not
    bracket it (a grid of fewer than three budgets brackets nothing)."""
    budgets = sorted(set(grid))
    return len(budgets) < 3 or best in (budgets[0], budgets[-1])


def edge_of(keys: list[str], best: str) -> bool:
    """`at_edge` for run keys: `best` among the budgets of `keys` (one method's runs)."""
    return at_edge(budget_of(best), [budget_of(k) for k in keys])


def relabeled(records: list[dict], chosen: dict[str, str], label: str) -> list[dict]:
    """Copies of the records of the run chosen per task (`chosen`: task -> key), keyed `label`."""
    return [{**r, "key": label} for r in records if chosen.get(r.get("task", "custom")) == r["key"]]


def validate(records: list[dict], baseline: str = "ar") -> dict:
    """Modeled vs wall-clock speedup per task and run, with the mean absolute errors (module doc)."""
    rows = []
    for task, recs in by_task(records).items():
        for row in summarize(recs, baseline):
            if row["key"] == baseline or math.isnan(row["speedup"]) or math.isnan(row["modeled_speedup"]):
                continue
            err = row["modeled_speedup"] - row["speedup"]
            rows.append({"task": task, "key": row["key"], "prompts": row["prompts"], "speedup": row["speedup"],
                         "speedup_ci": row["speedup_ci"], "modeled_speedup": row["modeled_speedup"], "error": err,
                         "rel_error": err / row["speedup"]})
    n = len(rows)
    return {"rows": rows, "cost_profile": profile_labels(records),
            "mae": sum(abs(r["error"]) for r in rows) / n if n else math.nan,
            "mare": sum(abs(r["rel_error"]) for r in rows) / n if n else math.nan}


def format_validation(v: dict) -> str:
    head = f"{'task':<12} {'run':<14} {'n':>3} {'wall':>7} {'wall CI95':>13} {'modeled':>8} {'error':>7} {'rel':>6}"
    lines = [f"modeled vs wall-clock speedup (cost profile {', '.join(v['cost_profile']) or 'none'})", head,
             "-" * len(head)]
    for r in v["rows"]:
        ci = r.get("speedup_ci")
        ci = f"{'-':>13}" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]".rjust(13)
        lines.append(f"{r['task']:<12} {r['key']:<14} {r['prompts']:>3} {r['speedup']:>6.3f}x {ci} "
                     f"{r['modeled_speedup']:>7.3f}x {r['error']:>+7.3f} {100 * r['rel_error']:>+5.1f}%")
    lines.append(f"mean absolute error: {v['mae']:.3f}x ({100 * v['mare']:.1f}% of the wall-clock speedup) over "
                 f"{len(v['rows'])} runs x tasks")
    return "\n".join(lines)
