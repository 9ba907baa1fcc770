"""A drafter's lineage: the evaluations of every training stage behind its weights, as one curve.

A drafter is rarely trained in one run: each `graft train-drafter --init-drafter DIR` continues the
weights of DIR with its own data, schedule and held-out split, and its `metrics.jsonl` starts again
at step 0. `lineage.jsonl` (beside the weights in a drafter directory) holds the eval records of all
the stages, oldest first, so that the learning curve of the shipped drafter covers all of its
training, not only the last run.

Each record is a stage's eval record (`metrics.jsonl`, kind "eval") plus
  stage          the stage's name (its run directory's name);
  stage_step     its step within the stage (the original `step`);
  step, labels_seen, blocks_seen, elapsed_s
                 cumulative over the lineage: the stage's own value plus the previous stages' final ones
                 (a stage's first eval of a warm start, at its step 0, sits where the previous stage
                 ended; it may differ from the previous stage's last eval, because each stage scores its
                 own held-out split: the jump shows the change of split, not of the weights).
Invariant: the cumulative fields never decrease along the file, and each stage's records are
consecutive. `extend` is the only writer's rule: a warm-started run's lineage is its parent's
(`read_lineage` of the --init-drafter directory, kept in the run's folder when the run begins:
`save_parent` / `parent_lineage`; a directory without a lineage file counts as one stage of its
`metrics.jsonl`, or none) followed by its own evaluations.
"""

import json
import re
from pathlib import Path

from graftlib.core.records import read_records

LINEAGE = "lineage.jsonl"
PARENT = "parent-lineage.jsonl"  # in a run's folder: the warm start's lineage when the run began
METRICS = "metrics.jsonl"
TRAINING = "training.json"
CUMULATIVE = ("step", "labels_seen", "blocks_seen", "elapsed_s")


def eval_records(recs: list[dict]) -> list[dict]:
    """The eval records of one run's `metrics.jsonl` records, each with `labels_seen` and `blocks_seen`: as
    recorded, or for records written before they were counted, step x the run's mean per train line,
    marked `labels_estimated` (none without train lines)."""
    train = [r for r in recs if r.get("kind") == "train" and "labels" in r]
    per_step = {k: sum(r.get(k, 0) for r in train) / len(train) for k in ("labels", "blocks")} if train else None
    out = []
    for r in recs:
        if r.get("kind") != "eval":
            continue
        if "labels_seen" not in r and per_step:
            r = {**r, "labels_seen": round(r["step"] * per_step["labels"]),
                 "blocks_seen": round(r["step"] * per_step["blocks"]), "labels_estimated": True}
        out.append(r)
    return out


def stage_records(metrics: str | Path, stage: str) -> list[dict]:
    """The eval records of one run's `metrics.jsonl` (`eval_records`), named `stage` (not yet cumulative)."""
    return [{**r, "stage": stage, "stage_step": r["step"]} for r in eval_records(read_records(metrics))]


def extend(parent: list[dict], stage: list[dict]) -> list[dict]:
    """`parent` (a lineage) followed by `stage` (`stage_records`), its cumulative fields offset by the
    parent's last values (module doc)."""
    last = parent[-1] if parent else {}
    offset = {k: last.get(k, 0) or 0 for k in CUMULATIVE}
    return parent + [{**r, **{k: offset[k] + r[k] for k in CUMULATIVE if r.get(k) is not None}} for r in stage]


def read_lineage(drafter_dir: str | Path) -> list[dict]:
    """The lineage of a drafter directory: its `lineage.jsonl`; else its `metrics.jsonl` as one stage
    named after the directory; else the final evaluation of its `training.json` as a one-record stage
    named after the run's output (a drafter shipped with its record only, e.g. the first EAGLE-3 one:
    a warm start from it still counts its training); else none (e.g. a z-lab drafter)."""
    d = Path(drafter_dir)
    if (d / LINEAGE).is_file():
        return read_records(d / LINEAGE)
    if (d / METRICS).is_file():
        return extend([], stage_records(d / METRICS, stage_name(d)))
    if (d / TRAINING).is_file():
        record = json.loads((d / TRAINING).read_text())
        final = record.get("final_eval")
        if final is None:
            return []
        out = re.search(r"--out\s+(\S+)", record.get("command") or "")
        name = Path(out.group(1)).name if out else stage_name(d)
        return [{**final, "labels_seen": record["labels_seen"], "blocks_seen": record["blocks_seen"],
                 "elapsed_s": record.get("train_s", final["elapsed_s"]), "stage": name, "stage_step": final["step"]}]
    return []


def save_parent(run_dir: str | Path, parent_dir: str | Path | None) -> None:
    """Keep the warm start's lineage in the run's folder (`PARENT`) when the run begins: a drafter written
    over `parent_dir` while the run trains (e.g. another one shipped as `embedded`) is not its parent."""
    write_lineage(Path(run_dir) / PARENT, read_lineage(parent_dir) if parent_dir else [])


def parent_lineage(run_dir: str | Path, parent_dir: str | Path | None) -> list[dict]:
    """The run's parent lineage: its `save_parent` snapshot, or for a run begun before snapshots, the
    lineage of `parent_dir` now (None: no parent)."""
    snapshot = Path(run_dir) / PARENT
    if snapshot.is_file():
        return read_records(snapshot)
    return read_lineage(parent_dir) if parent_dir else []


def stage_name(drafter_dir: str | Path) -> str:
    """A stage's name: its run directory's (`runs/drafter-v7` for `runs/drafter-v7/drafter`)."""
    d = Path(drafter_dir).resolve()
    return d.parent.name if d.name == "drafter" else d.name


def write_lineage(path: str | Path, lineage: list[dict]) -> None:
    """The lineage as JSON lines, written under a temporary name and renamed."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in lineage))
    tmp.replace(path)


def save_curves(metrics: str | Path, final: str | Path, parent_dir: str | Path | None) -> None:
    """A finished run's `metrics.jsonl` copied beside its weights (`final`), and its `lineage.jsonl`: the
    parent lineage (`parent_lineage`: the warm start's as it was when the run began) followed by this
    run's evaluations, so a shipped drafter carries the learning curve of all its training."""
    final = Path(final)
    (final / METRICS).write_bytes(Path(metrics).read_bytes())
    own = stage_records(metrics, stage_name(final))
    write_lineage(final / LINEAGE, extend(parent_lineage(final.parent, parent_dir), own))


def stages(lineage: list[dict]) -> list[tuple[str, int]]:
    """(stage name, index of its first record) in order: where the curve's stages begin."""
    out: list[tuple[str, int]] = []
    for i, r in enumerate(lineage):
        if not out or r.get("stage") != out[-1][0]:
            out.append((r.get("stage"), i))
    return out
