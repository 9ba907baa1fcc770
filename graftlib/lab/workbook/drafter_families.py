"""The two drafter families side by side from their training records: DFlash (one block forward per round)
and EAGLE-3 (one forward per depth), at the training compute each received.

Both trainers share `graftlib.training.drafter.trainer`: with the same data and split settings they score exactly
the same held-out anchors against the same labels (`graftlib.training.drafter.eval_anchors`: `same_anchors` names the
first difference), so the final evaluations in the two drafters' `training.json` compare entry by entry. The EAGLE-3
drafter, trained in stages on the corpora one run can featurize, ships with the DFlash drafter scored on its
anchors (`anchors.REFERENCE`, read by `anchors.read_reference`): pass it as `scored` to show that evaluation in
the DFlash row, whose compute stays its own lineage's. The per-depth column to compare is "chain dK": the share of
held-out chains that accept K drafts or more (`trainer.DepthStats.chain_by_depth`), and its sum, the
offline chain tau (1 + drafts accepted in a row; on greedy data the chain decode's). The "top-1 dK" hit
rates are each family's own quantity: DFlash predicts every depth from the anchor at once, the EAGLE-3
unroll is teacher-forced (depth K sees the true tokens before it, a conditional rate), so EAGLE-3's top-1
stays high at depth where its chain has long stopped; records older than `chain_by_depth` show None there.
Held-out losses are not compared:
the two recipes weight different positions (DFlash's position decay, EAGLE-3's unrolled steps).

Compute. A drafter trained in stages has a `lineage.jsonl` (`graftlib.training.drafter.lineage`) whose
last record holds the cumulative budget minutes and labels of all stages (each stage on its own clock:
wall or process CPU); otherwise the run's `train_s` on its `clock`. The in-loop figures (MAT, draft ms
per round) belong to the benches (Table 1's stage breakdown), not to these records.
"""

from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.records import read_records
from graftlib.training.drafter.eval_anchors import same_anchors, training_record
from graftlib.training.drafter.lineage import LINEAGE

DEPTHS = (1, 2, 3, 4, 8)  # the columns of per-depth top-1
__all__ = ["families_table", "family_row", "plot_families", "same_anchors"]


def compute(drafter_dir: str | Path, record: dict) -> dict:
    """{"minutes", "clock", "stages", "labels_seen"}: the whole lineage's where the directory has one."""
    lineage = Path(drafter_dir) / LINEAGE
    if lineage.is_file():
        recs = read_records(lineage)
        stages = list(dict.fromkeys(r["stage"] for r in recs))
        return {"minutes": recs[-1]["elapsed_s"] / 60, "clock": "per stage", "stages": len(stages),
                "labels_seen": recs[-1]["labels_seen"]}
    return {"minutes": record["train_s"] / 60, "clock": record["config"]["clock"], "stages": 1,
            "labels_seen": record["labels_seen"]}


def family_row(name: str, drafter_dir: str | Path, scored: dict | None = None) -> dict:
    """One drafter's row: its compute and final held-out evaluation (module doc); `scored`: a training record
    of the same weights scored on other anchors (the shipped DFlash reference) whose evaluation to show."""
    own = training_record(drafter_dir)
    c, shown = compute(drafter_dir, own), scored or own
    ev = shown["final_eval"]
    top1, top4, chain = ev["acc_by_depth"], ev["top4_by_depth"], ev.get("chain_by_depth")
    return {"drafter": name, "training min": round(c["minutes"], 1), "clock": c["clock"], "stages": c["stages"],
            "labels seen": int(c["labels_seen"]), "steps (last stage)": own["steps"],
            **{f"chain d{d}": chain[d - 1] if chain else None for d in DEPTHS if d <= len(top1)},
            **{f"top-1 d{d}": top1[d - 1] for d in DEPTHS if d <= len(top1)},
            "top-4 d1": top4[0], "offline tau": ev["offline_tau"],
            "held-out sequences": shown["split"]["heldout_sequences"]}


def families_table(drafters: dict[str, str | Path], scored: dict[str, dict] | None = None) -> list[dict]:
    """`{name: drafter directory}` -> one row per drafter (`family_row`), in the given order; `scored`:
    `{name: training record}` whose evaluations replace those drafters' own."""
    require(len(drafters) > 0, "no drafters to compare")
    scored = scored or {}
    return [family_row(name, d, scored.get(name)) for name, d in drafters.items()]


def plot_families(drafters: dict[str, str | Path], title: str, scored: dict[str, dict] | None = None):
    """Held-out top-1 (solid) and top-4 (dashed) hit rate and, where recorded, the share of chains reaching
    the depth (dotted) against depth, one colour per drafter."""
    import matplotlib.pyplot as plt

    from graftlib.lab.workbook.plots.layout import legend_outside

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (name, d) in enumerate(drafters.items()):
        ev = ((scored or {}).get(name) or training_record(d))["final_eval"]
        depths = range(1, len(ev["acc_by_depth"]) + 1)
        ax.plot(depths, ev["acc_by_depth"], "o-", ms=3, color=f"C{i}", label=f"{name}: top-1")
        ax.plot(depths, ev["top4_by_depth"], "s--", ms=3, color=f"C{i}", label=f"{name}: top-4")
        if ev.get("chain_by_depth"):
            ax.plot(depths, ev["chain_by_depth"], "^:", ms=3, color=f"C{i}", label=f"{name}: chain reaches depth")
    ax.set_xlabel("depth (draft position after the last committed token)")
    ax.set_ylabel("hit rate vs the target's greedy token (held-out)", fontsize=8)
    legend_outside(ax)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return fig
