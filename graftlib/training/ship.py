"""`graft ship-artifacts` (and `graft prepare --ship`): a `graft prepare` folder into the shipped assets.

`make artifacts` refreshes the shipped scorers and calibrations (`graftlib.inputs.artifacts.ShippedAssets`) from
one `graft prepare --task-scorers gsm8k --ship` folder: tdes.* -> tdes/default.*, tdes-<task>.* -> tdes/<task>.*,
saba.json -> saba/default.json, saba-paper-a100.json -> saba/paper-a100.json, each JSON given a `shipped`
record (folder, drafter weights id, the regenerating command). A folder fitted on the drafter-strength
construction (`graft prepare --strength NAME`) ships as tdes/paper-acceptance[-<calibration>][-<task>].* and
saba/paper-acceptance[-<calibration>].json (no calibration part for `own-spine`, `artifacts.acceptance_name`).

Invariants: only the embedded pair's finished folder ships (another pair's is refused by name, nothing
written); files are staged as `.partial` and renamed together, so a failure leaves the assets as they were;
weights are copied byte for byte, so the ids are the folder's. `--assets` makes the root a parameter.

`graft ship-drafter --from DIR` (the step before) makes a trained DFlash drafter the embedded one, loaded
strictly against the embedded target and staged the same way; everything fitted for the old drafter is
stale from then on (`check_shipped`). `graft ship-eagle3` and `graft ship-dflash2` do the same for the EAGLE-3
drafter and the DFlash 2 selector (refused unless its draft weights are the embedded drafter's).

Details: docs/internals.md, `graftlib.training.ship`.
"""

import json
import os
import shutil
import time
from pathlib import Path

from safetensors.torch import load_file, save_file

from graftlib.core.errors import require
from graftlib.core.paths import portable
from graftlib.core.records import read_json_object
from graftlib.inputs.artifacts import ArtifactDir, ShippedAssets, acceptance_name
from graftlib.methods.tdes import scorer_config, scorer_paths
from graftlib.models.dflash2 import pack_selector
from graftlib.models.drafter import EMBEDDED_DRAFTER, EMBEDDED_DRAFTER_DIR, SELECTOR_FILE
from graftlib.models.pair import PairId
from graftlib.models.strength import calibration_name
from graftlib.models.target import EMBEDDED_TARGET
from graftlib.training.drafter.eval_anchors import REFERENCE, check_reference, training_record

REGENERATE = "make artifacts"
# A drafter directory's files that ship (config.json and the weights are required).
DRAFTER_FILES = ("config.json", "model.safetensors", "training.json", "metrics.jsonl", "lineage.jsonl")
FAMILIES = {"dflash": "DFlash", "dflash2": "DFlash 2", "eagle3": "EAGLE-3"}  # `ship_drafter`'s families, names


def require_embedded(target: str, drafter: str) -> None:
    """Only the embedded pair's artifacts ship: refuse other model names before anything loads."""
    require((target, drafter) == (EMBEDDED_TARGET, EMBEDDED_DRAFTER),
            f"only the embedded pair's artifacts ship into the package (--target {EMBEDDED_TARGET} --drafter "
            f"{EMBEDDED_DRAFTER}), not those of --target {target} --drafter {drafter}: use them with "
            "`--artifacts DIR` instead")


def _require_folder(d: ArtifactDir) -> None:
    require(d.manifest.is_file(), f"{d.root} is not a `graft prepare` folder (no {d.manifest.name}): make one "
            f"with `graft prepare --out {d.root}`")


def _manifest(d: ArtifactDir, embedded: PairId) -> dict:
    _require_folder(d)
    manifest = d.read_manifest()
    fitted = PairId.from_dict(manifest.get("pair"), str(d.manifest))
    require(fitted.same(embedded), f"{d.root} holds the artifacts of {fitted}, not of the embedded pair, {embedded}: "
            "only the embedded pair's artifacts ship (use this folder with `--artifacts DIR`)")
    steps = manifest["steps"]
    needed = {"tdes", "saba-paper"} if manifest.get("strength") else {"tdes", "saba"}
    unfinished = sorted(needed - set(steps)) + sorted(k for k, s in steps.items() if s.get("complete") is not True)
    require(not unfinished, f"{d.root} is not finished (missing or incomplete: {', '.join(unfinished)}): re-run the "
            "same `graft prepare` (it goes on where it stopped) before shipping")
    return manifest


def shipments(d: ArtifactDir, manifest: dict, assets: ShippedAssets) -> list[tuple[Path, Path]]:
    """(source weights or JSON, destination) of every artifact the folder ships (module doc); a folder fitted on the
    drafter-strength construction ships under its calibration's names (`artifacts.acceptance_name`, and its
    `-<task>` scorers)."""
    tasks = [s["task"] for step, s in sorted(manifest["steps"].items()) if step.startswith("tdes-")]
    if manifest.get("strength"):
        calibration = calibration_name(manifest["strength"]["strength_file"])
        name = acceptance_name(calibration)
        return ([(d.tdes, assets.tdes(name))] + [(d.task_tdes(t), assets.tdes(f"{name}-{t}")) for t in tasks]
                + [(d.saba_paper, assets.saba_acceptance(calibration))])
    scorers = [(d.tdes, assets.tdes("default"))] + [(d.task_tdes(t), assets.tdes(t)) for t in tasks]
    paper = [(d.saba_paper, assets.saba_paper)] if "saba-paper" in manifest["steps"] else []
    return scorers + [(d.saba, assets.saba)] + paper


def _stamped(record: dict, where: str, embedded: PairId, shipped: dict) -> dict:
    """`record` (a scorer config or a calibration meta) checked for the embedded pair, with `shipped` added."""
    fitted = PairId.from_dict(record.get("pair"), where)
    require(fitted.same(embedded), f"{where} was fitted for {fitted}, not for the embedded pair, {embedded}: "
            "re-run `graft prepare` on the embedded pair")
    return {**record, "shipped": shipped}


def _staged(src: Path, dest: Path, embedded: PairId, shipped: dict) -> list[tuple[Path, Path]]:
    """Write `src`'s files beside their destinations as .partial; return (partial, destination) pairs."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix == ".safetensors":
        weights, config = scorer_paths(src)
        text = json.dumps(_stamped(scorer_config(src), portable(config), embedded, shipped), indent=1, default=str)
        files = [(weights, dest, None), (config, dest.with_suffix(".json"), text)]
    else:
        d = read_json_object(src, "SABA calibration")
        d["meta"] = _stamped(d.get("meta") or {}, portable(src), embedded, shipped)
        files = [(src, dest, json.dumps(d, indent=1))]
    staged = []
    for source, target, text in files:
        tmp = target.with_name(target.name + ".partial")
        if text is None:
            shutil.copyfile(source, tmp)
        else:
            tmp.write_text(text + "\n")
        staged.append((tmp, target))
    return staged


def _discard(plan: list[tuple[Path, Path]]) -> None:
    for _, dest in plan:
        for target in (dest, dest.with_suffix(".json")):
            target.with_name(target.name + ".partial").unlink(missing_ok=True)


def ship(folder: str | Path, embedded: PairId, assets: ShippedAssets | None = None, log=print) -> list[Path]:
    """Copy a finished `graft prepare` folder of the embedded pair into `assets` (module doc); returns
    the files written."""
    d, assets = ArtifactDir(Path(folder)), assets or ShippedAssets()
    manifest = _manifest(d, embedded)
    shipped = {"from": portable(d.root), "drafter_fingerprint": embedded.drafter_fingerprint,
               "regenerate": REGENERATE, "prepare_command": manifest.get("command"),
               "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    plan = shipments(d, manifest, assets)
    staged = None
    try:
        staged = [f for src, dest in plan for f in _staged(src, dest, embedded, shipped)]
    finally:
        if staged is None:  # a refused or unreadable artifact: nothing of this shipment stays
            _discard(plan)
    for tmp, dest in staged:
        tmp.replace(dest)
        log(f"ship: {portable(assets.root)}/{dest.relative_to(assets.root).as_posix()}")
    return [dest for _, dest in staged]


def ship_drafter(src: str | Path, target, dest: Path, family: str = "dflash", log=print,
                 reference: tuple[str | Path, Path] | None = None, drafts_of: Path | None = None) -> list[Path]:
    """Make the `family` ("dflash", "dflash2" or "eagle3") drafter in `src` the one in `dest` (module doc);
    `target` is the target model it must fit (an EAGLE-3 checkpoint leaves its embedding to the target's).
    `drafts_of` (DFlash 2 only): the DFlash drafter directory whose drafts it must keep (None: the embedded one's).
    `reference` (EAGLE-3 only): (the shipped DFlash drafter scored on `src`'s anchors, the shipped DFlash
    directory), checked and shipped as `anchors.REFERENCE` (`anchors.check_reference`); without it an old
    reference is removed. Returns the files written."""
    require(family in FAMILIES, f"unknown drafter family {family!r}: {', '.join(FAMILIES)}")
    require(reference is None or family == "eagle3", "a DFlash reference ships with an EAGLE-3 drafter only")
    name = FAMILIES[family]
    src = Path(src)
    require(src.is_dir(), f"drafter directory {src} does not exist")
    missing = [f for f in DRAFTER_FILES[:2] if not (src / f).is_file()]
    require(not missing, f"{src} is not a {name} drafter directory (missing {', '.join(missing)})")
    require(src.resolve() != dest.resolve(), f"{src} is already the shipped drafter")
    drafts_of = (drafts_of or EMBEDDED_DRAFTER_DIR) if family == "dflash2" else None
    _load_strict(family, src, target, drafts_of)  # a drafter of another target is refused here
    ref = check_reference(reference[0], training_record(src), reference[1]) if reference else None
    dest.mkdir(parents=True, exist_ok=True)
    names = [f for f in DRAFTER_FILES if (src / f).is_file()]
    staged = []
    try:
        if family == "dflash2":  # the selector alone, beside the drafter it completes
            staged += _stage_selector(src, dest, drafts_of)
            names = [f for f in names if f not in DRAFTER_FILES[:2]]
        for name in names:
            tmp = dest / (name + ".partial")
            shutil.copyfile(src / name, tmp)
            staged.append((tmp, dest / name))
        if ref is not None:
            tmp = dest / (REFERENCE + ".partial")
            tmp.write_text(json.dumps(ref, indent=1) + "\n")
            staged.append((tmp, dest / REFERENCE))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    shipping = {final.name for _, final in staged}
    stale = [*DRAFTER_FILES[2:], *([REFERENCE] if family == "eagle3" else []),
             *(["model.safetensors"] if family == "dflash2" else [])]
    for name in stale:
        if name not in shipping:  # an old record that the new drafter lacks would describe the wrong weights
            (dest / name).unlink(missing_ok=True)
    for tmp, final in staged:
        tmp.replace(final)
        log(f"ship: {portable(final)}")
    return [final for _, final in staged]


def _stage_selector(src: Path, dest: Path, drafts_of: Path) -> list[tuple[Path, Path]]:
    """A DFlash 2 drafter's selector as a selector-only checkpoint in `dest` (`drafter.DFlashConfig.selector_of`:
    `drafts_of`, relative to `dest`): its config and `SELECTOR_FILE`, staged as `.partial`."""
    config = json.loads((src / "config.json").read_text())
    config.setdefault("dflash_config", {})["selector_of"] = os.path.relpath(drafts_of.resolve(), dest.resolve())
    state = load_file(src / "model.safetensors")
    out = []
    tmp = dest / "config.json.partial"
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    out.append((tmp, dest / "config.json"))
    tmp = dest / (SELECTOR_FILE + ".partial")
    save_file(pack_selector(state, state.get("d2t")), tmp, metadata={"format": "pt"})
    out.append((tmp, dest / SELECTOR_FILE))
    return out


def _load_strict(family: str, src: Path, target, drafts_of: Path | None = None) -> None:
    """Load the drafter in `src` strictly against `target`: GraftError on any misfit. A DFlash 2 drafter must
    also hold a selector and draft what the drafter in `drafts_of` drafts (their `identify` fingerprints equal)."""
    if family in ("dflash", "dflash2"):
        from graftlib.models.drafter import load_drafter
        from graftlib.models.pair import identify

        drafter, _ = load_drafter(str(src), target.config, device="cpu")
        if family == "dflash2":
            require(getattr(drafter, "candidate_selector", None) is not None,
                    f"{portable(src)} has no DFlash 2 candidate selector (selector_rank in its dflash_config)")
            plain, _ = load_drafter(str(drafts_of), target.config, device="cpu")
            mine, theirs = (identify(target, d).drafter_fingerprint for d in (drafter, plain))
            require(mine == theirs, f"{portable(src)} drafts with weights {mine}, not those of {portable(drafts_of)} "
                    f"({theirs}): train its selector on that drafter frozen (`graft train-drafter --init-drafter DIR "
                    "--selector-rank R --parts-only`)")
    else:
        from graftlib.models.eagle3 import load_eagle3

        load_eagle3(src, target.get_input_embeddings().weight.detach()).fit(target.config)


# ----------------------------------------------------------------------------- CLI


def add_parser(sub) -> None:
    p = sub.add_parser("ship-artifacts", help="copy a finished `graft prepare` folder of the embedded pair into "
                       "the shipped assets (graftlib/assets)")
    p.add_argument("--from", dest="folder", required=True, help="the `graft prepare` folder (e.g. "
                                                                "artifacts/smollm2-135m--embedded-<drafter id>)")
    p.add_argument("--assets", default=None, help=f"the assets root (default: {portable(ShippedAssets().root)})")
    p.set_defaults(func=run)
    p = sub.add_parser("ship-drafter", help="make a trained DFlash drafter directory the embedded drafter (then "
                       "`make artifacts` refits everything that depends on it)")
    p.add_argument("--from", dest="folder", required=True, help="the drafter directory (e.g. runs/drafter-v5/drafter)")
    p.set_defaults(func=run_ship_drafter, family="dflash")
    p = sub.add_parser("ship-eagle3", help="make a trained EAGLE-3 drafter directory the embedded target's EAGLE-3 "
                       "drafter (the eagle3 and opt-tree methods)")
    p.add_argument("--from", dest="folder", required=True,
                   help="the drafter directory (e.g. runs/eagle3-equal/drafter)")
    p.add_argument("--reference", default=None, metavar="DIR",
                   help="the shipped DFlash drafter scored on this drafter's held-out anchors "
                   "(`experiments/eagle3-equal.sh`'s "
                   "runs/eagle3-equal-dflash/drafter), shipped beside it for the families table")
    p.set_defaults(func=run_ship_drafter, family="eagle3")
    p = sub.add_parser("ship-dflash2", help="make a DFlash 2 drafter directory (the embedded drafter's weights and "
                       "a selector trained on them, `--parts-only`) the one of `--drafter embedded-dflash2`")
    p.add_argument("--from", dest="folder", required=True,
                   help="the drafter directory (e.g. runs/drafter-dflash2/selector/drafter)")
    p.set_defaults(func=run_ship_drafter, family="dflash2")


def run_ship_drafter(args) -> int:
    from graftlib.models.drafter import EMBEDDED_DFLASH2_DIR, EMBEDDED_DRAFTER_DIR
    from graftlib.models.eagle3 import EMBEDDED_EAGLE3_DIR
    from graftlib.models.target import load_target

    target, _ = load_target(EMBEDDED_TARGET, device="cpu")
    dest = {"dflash": EMBEDDED_DRAFTER_DIR, "dflash2": EMBEDDED_DFLASH2_DIR, "eagle3": EMBEDDED_EAGLE3_DIR}[args.family]
    reference = getattr(args, "reference", None)
    written = ship_drafter(args.folder, target, dest, args.family,
                           reference=(reference, EMBEDDED_DRAFTER_DIR) if reference else None)
    if args.family == "dflash":
        print(f"shipped {len(written)} files of {args.folder} as the embedded drafter; its scorers and calibration "
              f"are now stale: run `{REGENERATE}` (traces, TDES, SABA, figures)")
    elif args.family == "dflash2":
        print(f"shipped {len(written)} files of {args.folder} as the embedded DFlash 2 drafter (the embedded drafter's "
              "drafts, so its scorers and calibration hold); refresh Table 2's figures with `make main`")
    else:
        print(f"shipped {len(written)} files of {args.folder} as the embedded EAGLE-3 drafter; the figures drawn "
              "with the old one name its id (figures/manifest.json): refresh them with `make main`")
    return 0


def run(args) -> int:
    from graftlib.models.pair import load_pair

    _require_folder(ArtifactDir(Path(args.folder)))  # before the models load
    embedded = load_pair(device="cpu").identity()
    assets = ShippedAssets(Path(args.assets)) if args.assets else ShippedAssets()
    written = ship(args.folder, embedded, assets)
    print(f"shipped {len(written)} files of {embedded} into {portable(assets.root)}")
    return 0
