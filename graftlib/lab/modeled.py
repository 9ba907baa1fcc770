"""Modeled throughput of bench records (issue 18): pricing, the ranking rule, and its validation.

Every bench record carries, beside its wall-clock `decode_s` / `tokens_per_s`, the modeled time of
its rounds under a cost profile (`graftlib.methods.cost_profile`, eq. 17 and the AR step cost):
  modeled_s             fsum of the rounds' modeled costs (AR and hf: new_tokens - 1 AR steps,
                        per turn of a multi-turn record, each from its own prompt length)
  modeled_tokens_per_s  decoded tokens (`metrics.decoded_tokens`) / modeled_s, the same tokens as
                        the wall-clock figure
  cost_profile          {"name", "id"} of the profile that priced it
A speculative record also keeps `round_shapes` ([budget, nodes, prefix_len, drafted] per round),
so `reprice` can price the same rounds under another profile (another machine) without decoding.
The profile is not part of the record's setting: it does not change what was measured, so
setting ids (and resuming) are as before; a record without round shapes (written before them)
prices to None unless it is an AR/hf decode.

Ranking rule (`rank`, issue 18 item 4): two runs a, b are compared on the prompts both decoded.
The wall-clock ratio TPS_b / TPS_a (pooled, paired per prompt, `metrics.pooled_speedup`) ranks
them when its bootstrap interval (`metrics.speedup_ci`) excludes 1.0; when the interval contains
1.0, or there are fewer than 3 prompts and no interval, wall clock cannot tell them apart on this
machine and the deterministic modeled ratio ranks them. `Ranking.caption` says which and why.

Validation (`validate`): per task and run, the wall-clock speedup vs the baseline and the modeled
one, their difference, and the mean absolute error over runs x tasks (absolute, in x, and
relative, in % of the wall-clock speedup; the baseline's own rows are left out, they are 1 both).
"""

import math
from collections import defaultdict
from dataclasses import dataclass

from graftlib.core.errors import require
from graftlib.lab.metrics import decoded_tokens, pooled_speedup, speedup_ci, summarize
from graftlib.lab.turns import turn_entries
from graftlib.methods.cost_profile import CostProfile, RoundShape

AR_LIKE = ("ar", "hf")


def price(rec: dict, profile: CostProfile) -> dict:
    """The modeled fields of one bench record under `profile` (module doc)."""
    require("new_tokens" in rec and "prompt_tokens" in rec,
            f"record {rec.get('uid')}/{rec.get('key')} has no new_tokens/prompt_tokens: not a bench record")
    if rec["method"] in AR_LIKE:
        seconds = math.fsum(profile.ar_modeled_seconds(t["prompt_tokens"], t["new_tokens"]) for t in turn_entries(rec))
    elif rec.get("round_shapes") is not None:
        seconds = profile.modeled_seconds([RoundShape.from_list(s) for s in rec["round_shapes"]])
    else:
        seconds = None
    tps = decoded_tokens(rec) / seconds if seconds else None
    return {"modeled_s": seconds, "modeled_tokens_per_s": tps, "cost_profile": profile.label}


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

    @property
    def ratio(self) -> float:
        return self.modeled_ratio if self.figure == "modeled" else self.wall_ratio

    @property
    def faster(self) -> str | None:
        """The faster run by the ranking figure (None on an exact tie)."""
        return None if self.ratio == 1.0 else self.b if self.ratio > 1.0 else self.a

    def caption(self) -> str:
        ci = "no interval (< 3 prompts)" if self.wall_ci is None else f"95% CI {self.wall_ci[0]:.3f}-{self.wall_ci[1]:.3f}"
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
    priced = all(x.get("modeled_s") is not None for pair in paired for x in pair)
    modeled = pooled_speedup(paired, "modeled_s") if priced else math.nan
    inside = ci is None or ci[0] <= 1.0 <= ci[1]
    figure = "modeled" if inside and priced else "wall-clock"
    labels = {x["cost_profile"]["name"] + " " + x["cost_profile"]["id"] for pair in paired for x in pair
              if x.get("cost_profile")}
    return Ranking(a, b, figure, wall, ci, modeled, ", ".join(sorted(labels)) or "none", len(paired))


def validate(records: list[dict], baseline: str = "ar") -> dict:
    """Modeled vs wall-clock speedup per task and run, with the mean absolute errors (module doc)."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_task[r.get("task", "custom")].append(r)
    rows = []
    for task, recs in by_task.items():
        for row in summarize(recs, baseline):
            if row["key"] == baseline or math.isnan(row["speedup"]) or math.isnan(row["modeled_speedup"]):
                continue
            err = row["modeled_speedup"] - row["speedup"]
            rows.append({"task": task, "key": row["key"], "prompts": row["prompts"], "speedup": row["speedup"],
                         "modeled_speedup": row["modeled_speedup"], "error": err, "rel_error": err / row["speedup"]})
    n = len(rows)
    return {"rows": rows, "cost_profile": sorted({r["cost_profile"]["name"] + " " + r["cost_profile"]["id"]
                                                  for r in records if r.get("cost_profile")}),
            "mae": sum(abs(r["error"]) for r in rows) / n if n else math.nan,
            "mare": sum(abs(r["rel_error"]) for r in rows) / n if n else math.nan}


def format_validation(v: dict) -> str:
    head = f"{'task':<12} {'run':<14} {'n':>3} {'wall':>7} {'modeled':>8} {'error':>7} {'rel':>6}"
    lines = [f"modeled vs wall-clock speedup (cost profile {', '.join(v['cost_profile']) or 'none'})", head,
             "-" * len(head)]
    for r in v["rows"]:
        lines.append(f"{r['task']:<12} {r['key']:<14} {r['prompts']:>3} {r['speedup']:>6.3f}x {r['modeled_speedup']:>7.3f}x "
                     f"{r['error']:>+7.3f} {100 * r['rel_error']:>+5.1f}%")
    lines.append(f"mean absolute error: {v['mae']:.3f}x ({100 * v['mare']:.1f}% of the wall-clock speedup) over "
                 f"{len(v['rows'])} runs x tasks")
    return "\n".join(lines)
