"""Figure helpers shared by the notebooks: one caption format, one save path, one tree drawing.

Every figure states its model pair, hardware and prompt counts (`caption`), and is written as PNG
and PDF under `figures/` (`save_figure`). `draw_mismatch` draws a real verified round as a small
tree: the accepted path, the last accepted node p*, and the target's next token t* sitting under
another parent (the paper's Figure 1(a) idea). matplotlib is imported lazily by the callers.
"""

from pathlib import Path


def caption(pair_desc: dict, **counts) -> str:
    """'target + drafter | hardware, dtype | k=v ...' for a figure's subtitle."""
    extra = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())
    return (f"{pair_desc['target']} + {pair_desc['drafter']} (trained={pair_desc['drafter_trained']}) | "
            f"{pair_desc['hardware']}, {pair_desc['dtype']}" + (f" | {extra}" if extra else ""))


def save_figure(fig, name: str, figures_dir: str | Path) -> list[Path]:
    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.{ext}" for ext in ("png", "pdf")]
    for p in paths:
        fig.savefig(p, dpi=150, bbox_inches="tight")
    return paths


def mismatch_view(record, max_extra_depth: int = 1) -> dict:
    """The nodes worth drawing for a recorded mismatch round (`RoundRecord` with `record_trees`):
    the accepted path, every node at depth <= d* + 1 on it or next to it, and where t* sits."""
    tree, acc = record.tree, record.accepted_nodes
    last = acc[-1]
    d_star, t_star = tree["depths"][last], record.target_next[last]
    keep = set(acc)
    for n in range(1, len(tree["tokens"])):
        d = tree["depths"][n]
        if d <= d_star + max_extra_depth and (tree["parents"][n] in keep or d == d_star + 1):
            keep.add(n)
    for n in sorted(keep):  # parents of the kept nodes (so every drawn node hangs somewhere)
        while n > 0 and tree["parents"][n] not in keep:
            n = tree["parents"][n]
            keep.add(n)
    hits = [n for n in keep if tree["depths"][n] == d_star + 1 and tree["tokens"][n] == t_star]
    return {"nodes": sorted(keep), "last": last, "t_star": t_star, "hits": hits, "accepted": acc}


def draw_mismatch(ax, record, decode_token, max_children: int = 4) -> None:
    """Draw a mismatch round: accepted path (green), p* (bold), t* under the wrong parent (red)."""
    view = mismatch_view(record)
    tree = record.tree
    nodes = set(view["nodes"])
    # keep the picture small: per parent, the accepted child, the t* hits and the best others
    by_parent: dict[int, list[int]] = {}
    for n in sorted(nodes - {0}):
        by_parent.setdefault(tree["parents"][n], []).append(n)
    shown = {0}
    for kids in by_parent.values():
        must = [k for k in kids if k in view["accepted"] or k in view["hits"]]
        shown.update(must + [k for k in kids if k not in must][:max(0, max_children - len(must))])
    shown = {n for n in shown if all(a in shown for a in _ancestors(tree["parents"], n))}
    depth_rows: dict[int, list[int]] = {}
    for n in sorted(shown, key=lambda n: (tree["depths"][n], _ancestors(tree["parents"], n)[::-1], n)):
        depth_rows.setdefault(tree["depths"][n], []).append(n)
    pos = {}
    for d, row in depth_rows.items():
        for i, n in enumerate(row):
            pos[n] = (i - (len(row) - 1) / 2, -d)
    for n in shown - {0}:
        p = tree["parents"][n]
        on_path = n in view["accepted"] and p in view["accepted"]
        ax.plot([pos[p][0], pos[n][0]], [pos[p][1], pos[n][1]], color="tab:green" if on_path else "0.7",
                lw=2 if on_path else 1, zorder=1)
    for n in shown:
        color = "tab:red" if n in view["hits"] else "tab:green" if n in view["accepted"] else "white"
        ax.text(*pos[n], repr(decode_token(tree["tokens"][n]))[1:-1] or "·", ha="center", va="center",
                fontsize=8, fontweight="bold" if n == view["last"] else "normal",
                bbox=dict(boxstyle="round", fc=color, ec="black" if n == view["last"] else "0.5", alpha=0.9))
    x_last, y_last = pos[view["last"]]
    ax.annotate(f"target wants {decode_token(view['t_star'])!r} here", (x_last, y_last - 1),
                xytext=(x_last, y_last - 1.35), ha="center", fontsize=7, color="tab:red")
    ax.set_axis_off()


def _ancestors(parents: list[int], n: int) -> list[int]:
    out = []
    while parents[n] >= 0:
        n = parents[n]
        out.append(n)
    return out


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
    axes[0].legend()
    axes[1].plot(steps, [r.get("tau", float("nan")) for r in ev], "o-", label="in-loop chain tau (held-out prompts)")
    axes[1].plot(steps, [r["offline_tau"] for r in ev], "s--", label="offline tau (held-out blocks)")
    axes[1].axhline(1.72, color="gray", ls=":", label="feasibility run, GSM8K only (FACTS 6)")
    axes[1].set_xlabel("step")
    axes[1].legend(fontsize=7)
    for key, label in (("acc_by_depth", "top-1"), ("top4_by_depth", "top-4"), ("top16_by_depth", "top-16")):
        if ev and key in ev[-1]:
            axes[2].plot(range(1, len(ev[-1][key]) + 1), ev[-1][key], "o-", ms=3, label=label)
    axes[2].set_xlabel("depth")
    axes[2].set_ylabel("hit rate vs the target (held-out)")
    axes[2].legend(fontsize=7)
    d = summary["data"]
    fig.suptitle(f"{name} | target {summary['target']} | {summary['hardware']} | {d['sequences']} sequences, "
                 f"{d['response_tokens']} response tokens | {summary['train_s'] / 60:.0f} min, {summary['steps']} steps",
                 fontsize=8)
    fig.tight_layout()
    return fig
