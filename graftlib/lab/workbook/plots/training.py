"""The drafter's training curves (`metrics.jsonl` of a run or a lineage): losses, chain tau and per-depth hit
rates against steps or tokens seen."""

from itertools import pairwise

from graftlib.lab.workbook.plots.layout import legend_outside
from graftlib.training.drafter.lineage import eval_records, stages


def plot_training_run(metrics, summary: dict, name: str):
    """Drafter training curves from `metrics.jsonl` (train/eval lines) and its `training.json`:
    losses, in-loop and offline chain tau, and the last evaluation's per-depth top-1/4/16 hit rates."""
    import matplotlib.pyplot as plt

    from graftlib.core.records import read_records

    recs = read_records(metrics)
    tr = [r for r in recs if r.get("kind") == "train"]
    ev = [r for r in recs if r.get("kind") == "eval"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    if tr:
        axes[0].plot([r["step"] for r in tr], [r["loss"] for r in tr], lw=0.5, alpha=0.6, label="train loss")
    steps = [r["step"] for r in ev]
    axes[0].plot(steps, [r["heldout_loss"] for r in ev], "o-", label="held-out loss")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("loss (cross-entropy vs the target, nats)")
    legend_outside(axes[0])
    axes[1].plot(steps, [r.get("tau", float("nan")) for r in ev], "o-", label="in-loop chain tau (held-out prompts)")
    axes[1].plot(steps, [r["offline_tau"] for r in ev], "s--", label="offline tau (held-out blocks)")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("chain tau (tokens accepted per round)")
    legend_outside(axes[1])
    for key, label in (("acc_by_depth", "top-1"), ("top4_by_depth", "top-4"), ("top16_by_depth", "top-16")):
        if ev and key in ev[-1]:
            axes[2].plot(range(1, len(ev[-1][key]) + 1), ev[-1][key], "o-", ms=3, label=label)
    axes[2].set_xlabel("depth")
    axes[2].set_ylabel("hit rate vs the target (held-out)")
    legend_outside(axes[2])
    d = summary["data"]
    fig.suptitle(f"{name} | target {summary['target']} | {summary['hardware']}\n{len(ev)} evaluations | "
                 f"{d['sequences']} sequences, {d['response_tokens']} response tokens | "
                 f"{summary['train_s'] / 60:.0f} min, {summary['steps']} steps", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.9))  # the two-line title above every panel's labels
    return fig


def curve_points(metrics) -> list[dict]:
    """The evaluations of a training run's `metrics.jsonl` (or a lineage), each with `tokens_seen` (the
    labels predicted with a loss so far: `lineage.eval_records`' `labels_seen`, estimated for records written
    before it was counted, then marked `tokens_estimated`)."""
    from graftlib.core.records import read_records

    return [{**r, "tokens_seen": r.get("labels_seen", 0),
             "tokens_estimated": "labels_seen" not in r or r.get("labels_estimated", False)}
            for r in eval_records(read_records(metrics))]


def plot_learning_curve(runs: dict, title: str, depths: tuple = (1, 2, 4, 8)):
    """Learning curves of one or more drafter runs (`{name: metrics.jsonl or lineage.jsonl}`) against the
    tokens seen (labels with a loss): held-out loss (and, where recorded, the hard CE on seen training text:
    the memorization gap), top-1 hit rate vs the target at `depths`, in-loop (solid) and offline (dashed) chain tau; the
    top axis of the first panel reads steps (first run's labels per step). A lineage
    (`graftlib.training.drafter.lineage`) gets a dotted line and its stage's name where each later stage begins, and
    no line joins two stages' points (each stage scores its own held-out split). Tokens seen on a log axis, so a
    short run reads beside a long lineage."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    styles = ["-", "--", ":", "-."]
    first = None
    for i, (name, metrics) in enumerate(runs.items()):
        pts = curve_points(metrics)
        if not pts:
            continue
        color = f"C{i}"
        x = [max(p["tokens_seen"], 1) / 1e6 for p in pts]  # a log axis: the first evaluation at one label
        est = " (tokens estimated)" if any(p["tokens_estimated"] for p in pts) else ""
        first = first or (pts[-1]["step"] / max(x[-1], 1e-12))
        cuts = [k for _, k in stages(pts)] + [len(pts)]
        for k, (a, b) in enumerate(pairwise(cuts)):  # each stage scores its own held-out split: no line
            seg, xs = pts[a:b], x[a:b]  # joins two stages' points
            keep = k == 0
            axes[0].plot(xs, [p["heldout_loss"] for p in seg], "o-", ms=3, color=color,
                         label=f"{name}{est}" if keep else None)
            if any("seen_ce" in p for p in seg):  # the same evaluation on training text (`LoopTrainer.seen_batches`)
                axes[0].plot(xs, [p.get("seen_ce", float("nan")) for p in seg], "x:", ms=3, color=color,
                             label=f"{name}: hard CE on seen (training) text" if keep else None)
            for j, d in enumerate(depths):
                ys = [p["acc_by_depth"][d - 1] if len(p.get("acc_by_depth", [])) >= d else float("nan") for p in seg]
                axes[1].plot(xs, ys, styles[j % len(styles)], marker="o", ms=2, color=color,
                             label=f"{name}: depth {d}" if keep else None)
            axes[2].plot(xs, [p.get("tau", float("nan")) for p in seg], "o-", ms=3, color=color,
                         label=f"{name}: in-loop chain tau" if keep else None)
            axes[2].plot(xs, [p.get("offline_tau", float("nan")) for p in seg], "s--", ms=3, color=color,
                         label=f"{name}: offline tau" if keep else None)
        for stage, first_index in stages(pts)[1:]:
            for ax in axes:
                ax.axvline(x[first_index], color=color, ls=":", lw=0.8)
                ax.annotate(stage, (x[first_index], 1.0), xycoords=("data", "axes fraction"), rotation=90,
                            va="top", ha="right", fontsize=6, color=color)
    for ax, ylabel in zip(axes, ("held-out loss", "top-1 hit rate vs the target (held-out)", "tau (tokens / round)")):
        ax.set_xscale("log")  # a short run beside a long lineage: both read, decades apart
        ax.set_xlabel("tokens seen (M labels, log scale)")
        ax.set_ylabel(ylabel, fontsize=8)
        legend_outside(ax)
    if first:
        top = axes[0].secondary_xaxis("top", functions=(lambda m: m * first, lambda s: s / first))
        top.set_xlabel("steps", fontsize=8)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return fig
