"""Which drafters' final evaluations scored the same held-out anchors, and the shipped DFlash reference.

Both trainers (`dflash_train`, `eagle3_train`) share `trainer`: with the same data directories (in
the same order), `heldout`, `seed`, `eval_blocks` and held-out grouping (`eval_blocks_per_seq`, by
default `blocks_per_seq`) they score exactly the same held-out anchors against the same labels (the
target's greedy tokens), so two `training.json` final evaluations compare entry by entry. `same_anchors`
checks those settings and names the first difference.

The DFlash reference. The EAGLE-3 drafter is trained in stages on the corpora one run can featurize,
so its held-out split is rarely the shipped DFlash drafter's own. `experiments/eagle3-equal.sh` therefore scores
the shipped DFlash drafter on the EAGLE-3 run's data and split (`graft train-drafter --init-drafter
embedded --max-steps 0`), and `graft ship-eagle3 --reference DIR` ships that scoring beside the EAGLE-3
weights as `REFERENCE`: the DFlash drafter's record on the EAGLE-3 drafter's anchors. Invariants of a
shipped reference (`check_reference`): it is a scoring (0 steps), its weights are the shipped DFlash
drafter's tensor for tensor, its anchors are the EAGLE-3 drafter's, and it records the DFlash
checkpoint's id (`dflash_checkpoint`), so that a DFlash drafter shipped later makes it stale
(`read_reference` then returns None) instead of silently comparing other weights.
"""

import json
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.paths import portable

REFERENCE = "dflash-reference.json"  # in the shipped EAGLE-3 folder
SPLIT_KEYS = ("heldout", "seed", "eval_blocks", "eval_blocks_per_seq")


def training_record(drafter_dir: str | Path) -> dict:
    """The `training.json` of a trained drafter directory, with its final evaluation."""
    path = Path(drafter_dir) / "training.json"
    require(path.is_file(), f"{portable(path)} does not exist: not a trained drafter directory")
    record = json.loads(path.read_text())
    require("final_eval" in record, f"{portable(path)} holds no final evaluation")
    return record


def split_setting(config: dict, key: str):
    """A setting that fixes the held-out anchors, as the trainer used it: the anchors' grouping per row is
    `eval_blocks_per_seq`, else (and in records older than it) `blocks_per_seq`."""
    if key == "eval_blocks_per_seq":
        return config.get(key) or config.get("blocks_per_seq")
    return config.get(key)


def same_anchors(a: dict | str | Path, b: dict | str | Path) -> str | None:
    """None when two final evaluations (training records, or drafter directories holding them) scored the
    same held-out anchors (module doc), else the first difference, named."""
    a, b = (x if isinstance(x, dict) else training_record(x) for x in (a, b))
    if [Path(d).name for d in a["data"]["dirs"]] != [Path(d).name for d in b["data"]["dirs"]]:
        return f"data directories differ: {a['data']['dirs']} vs {b['data']['dirs']}"
    for key in SPLIT_KEYS:
        if split_setting(a["config"], key) != split_setting(b["config"], key):
            return f"{key} differs: {split_setting(a['config'], key)} vs {split_setting(b['config'], key)}"
    if a["split"]["heldout_sequences"] != b["split"]["heldout_sequences"]:
        return f"held-out sequences differ: {a['split']['heldout_sequences']} vs {b['split']['heldout_sequences']}"
    return None


def _same_weights(a_dir: Path, b_dir: Path) -> str | None:
    """None when the two directories' safetensors hold equal tensors under equal names, else what differs."""
    import torch
    from safetensors.torch import load_file

    def state(d: Path) -> dict:
        files = sorted(d.glob("*.safetensors"))
        require(files, f"{portable(d)} holds no *.safetensors weights")
        return {k: v for f in files for k, v in load_file(f).items()}

    a, b = state(a_dir), state(b_dir)
    if a.keys() != b.keys():
        return f"tensor names differ ({sorted(a.keys() ^ b.keys())[:3]} ...)"
    unequal = [k for k in sorted(a) if a[k].shape != b[k].shape or not torch.equal(a[k], b[k].to(a[k].dtype))]
    return f"{len(unequal)} tensors differ ({unequal[0]} ...)" if unequal else None


def check_reference(reference_dir: str | Path, eagle3_record: dict, dflash_dir: str | Path) -> dict:
    """The record to ship as `REFERENCE` (module doc): `reference_dir`'s training record, checked to be a
    scoring of the DFlash drafter in `dflash_dir` on the anchors of `eagle3_record`; GraftError otherwise."""
    from graftlib.models.eagle3 import checkpoint_id

    reference_dir, dflash_dir = Path(reference_dir), Path(dflash_dir)
    record = training_record(reference_dir)
    where = portable(reference_dir)
    require(record.get("steps") == 0, f"{where} trained {record.get('steps')} steps: a reference is the shipped "
            "DFlash drafter scored without training (`graft train-drafter --init-drafter embedded --max-steps 0`)")
    differs = _same_weights(reference_dir, dflash_dir)
    require(differs is None, f"{where} does not hold the weights of {portable(dflash_dir)}: {differs}")
    differs = same_anchors(eagle3_record, record)
    require(differs is None, f"{where} was not scored on the EAGLE-3 drafter's held-out anchors: {differs}")
    return {**record, "dflash_checkpoint": checkpoint_id(dflash_dir)}


def read_reference(eagle3_dir: str | Path, dflash_dir: str | Path) -> dict | None:
    """The shipped DFlash reference of the EAGLE-3 drafter in `eagle3_dir` when it scored the DFlash drafter
    now in `dflash_dir` (by checkpoint id); None when there is none or it belongs to older DFlash weights."""
    from graftlib.models.eagle3 import checkpoint_id

    path = Path(eagle3_dir) / REFERENCE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    return record if record.get("dflash_checkpoint") == checkpoint_id(dflash_dir) else None
