"""The figures manifest: which notebook, profile, drafter and artifacts drew each file under figures/.

`graft workbook` (`graftlib.lab.workbook.runner.run_workbook`) snapshots the figures folder around each notebook:
every file it wrote gets an entry in `<figures>/manifest.json` (merged, so a partial run keeps the others):
notebook, profile, sha256, date and `drawn_with`: the pair's `PairId`, the ids of the TDES scorers, the SABA
calibrations (this machine's and the paper grid's), the cost profile, the EAGLE-3 and DFlash 2 drafters, and
the graftlib commit with whether the tree was dirty outside figures/ (computed once per run).

`check_figures` is the other half: every file under figures/ has an entry whose sha256 is the file's and
whose `drawn_with` names the shipped artifacts' ids (`shipped_ids`), and evidence figures all drawn at one
commit from a clean tree; one line per problem.

Details: docs/internals.md, `graftlib.lab.workbook.figures_manifest`.
"""

import hashlib
import subprocess
import time
from pathlib import Path

from graftlib.core.errors import GraftError
from graftlib.core.paths import PROJECT_DIR, portable
from graftlib.core.records import read_json_object, write_json_atomic
from graftlib.inputs.artifacts import ShippedAssets
from graftlib.inputs.cost_profile import from_saba, load_ar_draft_cost, with_ar_draft
from graftlib.methods.saba_params import SabaParams, default_params
from graftlib.methods.tdes import default_scorer_path, scorer_config, scorer_id
from graftlib.models.eagle3 import checkpoint_id
from graftlib.models.pair import PairId

SCHEMA = "graft-figures/1"
MANIFEST = "manifest.json"
NOT_FIGURES = frozenset({"README.md", MANIFEST})
COMMITTED_PROFILE = "evidence"  # the profile that draws the committed figures/ (runner.PROFILES["evidence"])
# the notebooks whose figures depend on the EAGLE-3 drafter (they run it,
# `graftlib.lab.run.ar_baselines.ar_baseline_runs`, or read its training record, `EMBEDDED_EAGLE3_DIR`;
# tests/test_figures_manifest.py keeps this set equal to them)
EAGLE3_NOTEBOOKS = frozenset({"fig1b_mismatch", "paper_regime", "sampling_temperature", "table1_main_results",
                              "table2_components", "train_drafter"})
# the notebooks that decode with the DFlash 2 drafter's selector (`graftlib.lab.run.edge_scores`)
DFLASH2_NOTEBOOKS = frozenset({"table2_components"})
# notebooks that decide with the paper-grid calibration (`saba_paper`): those drawing the paper's regime
PAPER_NOTEBOOKS = frozenset({"budget_policies", "fig1b_mismatch", "fig1c_budget_throughput", "fig5_generalization",
                             "fig6_oracle_tracking", "paper_regime", "strength_axis", "table1_main_results",
                             "table2_components", "table3_beta"})


def manifest_path(folder: str | Path) -> Path:
    return Path(folder) / MANIFEST


def snapshot(folder: str | Path) -> dict[str, tuple[int, int]]:
    """{file name: (mtime ns, size)} of the figure files in `folder` (none when it does not exist)."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()
            if p.is_file() and p.name not in NOT_FIGURES and not p.name.endswith(".partial")}


def drawn(before: dict, after: dict) -> list[str]:
    """The files written or rewritten between two snapshots."""
    return sorted(name for name, stamp in after.items() if before.get(name) != stamp)


def file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], check=False, capture_output=True, text=True, timeout=30)


def git_commit(root: Path = PROJECT_DIR) -> dict:
    """{"commit": HEAD or None, "dirty": bool or None} of the checkout at `root`; dirty: a tracked file changed
    outside figures/ (the drawing's own output, which a redraw changes before its later notebooks ask)."""
    try:
        head = _git(root, "rev-parse", "HEAD")
        status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)figures")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def drawn_with(params: dict) -> dict:
    """What the notebooks of a run with these parameters draw with (module doc); loads the pair once."""
    from graftlib.lab.run.costs.machine_costs import machine_profile
    from graftlib.models.drafter import EMBEDDED_DFLASH2, EMBEDDED_DRAFTER, resolve_drafter
    from graftlib.models.pair import load_pair
    from graftlib.models.target import EMBEDDED_TARGET

    drafter = params.get("drafter", EMBEDDED_DRAFTER)
    loaded = load_pair(params.get("target", EMBEDDED_TARGET), drafter, "cpu")
    try:
        eagle3 = checkpoint_id(loaded.eagle3_dir())
    except GraftError:  # no EAGLE-3 drafter for this pair: the baselines show "not run"
        eagle3 = None
    from graftlib.models.strength import CALIBRATIONS

    acceptance = ShippedAssets()  # the third regimes read their parts from the shipped assets only
    return {"pair": loaded.identity().to_dict(),
            "tdes": {"default": scorer_id(default_scorer_path()),
                     "gsm8k": scorer_id(params.get("gsm8k_scorer") or ShippedAssets().tdes("gsm8k")),
                     **{p.stem: scorer_id(p) for c in CALIBRATIONS for p in acceptance.acceptance_scorers(c).values()
                        if p.is_file()}},  # the third regime's, under each drafter-strength calibration shipped
            "saba": default_params().id, "saba_paper": _paper_id(ShippedAssets().saba_paper),
            "saba_paper_acceptance": _paper_id(acceptance.saba_paper_acceptance),
            "cost_profile": machine_profile(loaded, params.get("cost_profile") or None).id,
            "eagle3": eagle3,
            "dflash2": checkpoint_id(resolve_drafter(params.get("selector_drafter", EMBEDDED_DFLASH2) or drafter)),
            **git_commit()}


def shipped_ids(assets: ShippedAssets | None = None) -> dict:
    """The ids `drawn_with` names when the notebooks read the shipped artifacts under `assets`."""
    assets = assets or ShippedAssets()
    saba = SabaParams.load(assets.saba)
    return {"pair": scorer_config(assets.tdes("default")).get("pair"),
            "tdes": {name: scorer_id(path) for name, path in assets.scorers().items()},
            "saba": saba.id, "saba_paper": _paper_id(assets.saba_paper),
            "saba_paper_acceptance": _paper_id(assets.saba_paper_acceptance),
            "cost_profile": with_ar_draft(from_saba(saba), *load_ar_draft_cost(assets.ar_draft_cost)).id,
            "eagle3": checkpoint_id(assets.eagle3), "dflash2": checkpoint_id(assets.dflash2)}


def _paper_id(path: Path) -> str | None:
    return SabaParams.load(path).id if path.is_file() else None


def read_manifest(folder: str | Path) -> dict:
    path = manifest_path(folder)
    if not path.is_file():
        return {"schema": SCHEMA, "figures": {}}
    manifest = read_json_object(path, "figures manifest")
    return manifest if manifest.get("schema") == SCHEMA else {"schema": SCHEMA, "figures": {}}


def record(folder: str | Path, names: list[str], notebook: str, profile: str, used: dict) -> None:
    """Add (or replace) the entries of `names`, drawn by `notebook`, to the folder's manifest."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    date = time.strftime("%Y-%m-%d %H:%M:%S")
    for name in names:
        manifest["figures"][name] = {"notebook": notebook, "profile": profile, "sha256": file_hash(folder / name),
                                     "date": date, "drawn_with": used}
    manifest["figures"] = dict(sorted(manifest["figures"].items()))
    write_json_atomic(manifest_path(folder), manifest)


def _entry_problems(name: str, entry: dict, folder: Path, shipped: dict, profile: str) -> list[str]:
    used, out = entry.get("drawn_with") or {}, []
    if entry.get("sha256") != file_hash(folder / name):
        out.append(f"{name}: changed since {entry.get('notebook')} drew it (sha256 {entry.get('sha256')})")
    if entry.get("profile") != profile:
        out.append(f"{name}: drawn with profile {entry.get('profile')!r}, not {profile!r}")
    pair = used.get("pair")
    want = PairId.from_dict(shipped["pair"], "the shipped default TDES scorer")
    if pair is None or not PairId.from_dict(pair, f"{name} in the figures manifest").same(want):
        out.append(f"{name}: drawn with the pair {pair}, not the shipped artifacts' {want}")
    for key in ("saba", "cost_profile", "saba_paper", "saba_paper_acceptance"):
        ids = shipped[key]
        if key == "saba_paper_acceptance" and key not in used:  # drawn before the construction's parts were shipped,
            continue  # so without a paper+acceptance regime (`regimes.paper_acceptance` requires them)
        if used.get(key) != ids and (not key.startswith("saba_paper") or entry.get("notebook") in PAPER_NOTEBOOKS):
            out.append(f"{name}: drawn with {key} {used.get(key)}, the shipped one is {ids}")
    if entry.get("notebook") in EAGLE3_NOTEBOOKS and used.get("eagle3") != shipped["eagle3"]:
        out.append(f"{name}: drawn with the EAGLE-3 drafter {used.get('eagle3')}, the shipped one is "
                   f"{shipped['eagle3']}")
    if entry.get("notebook") in DFLASH2_NOTEBOOKS and used.get("dflash2") != shipped["dflash2"]:
        out.append(f"{name}: drawn with the DFlash 2 drafter {used.get('dflash2')}, the shipped one is "
                   f"{shipped['dflash2']}")
    tdes = used.get("tdes") or {}
    for scorer, ident in sorted(tdes.items()):
        if shipped["tdes"].get(scorer) != ident:
            out.append(f"{name}: drawn with the {scorer} TDES scorer {ident}, the shipped one is "
                       f"{shipped['tdes'].get(scorer)}")
    if not tdes:
        out.append(f"{name}: the manifest names no TDES scorer")
    return out


def check_figures(folder: str | Path, assets: ShippedAssets | None = None,
                  profile: str = COMMITTED_PROFILE) -> list[str]:
    """One line per problem of the module doc (empty: every figure is what `make main` draws from the
    shipped artifacts)."""
    folder = Path(folder)
    if not manifest_path(folder).is_file():
        return [f"{portable(manifest_path(folder))} does not exist: run `make main`"]
    entries = read_manifest(folder)["figures"]
    shipped = shipped_ids(assets)
    files = snapshot(folder)
    problems = [f"{name}: not in {MANIFEST} (drawn outside the workbook?)"
                for name in sorted(set(files) - set(entries))]
    problems += [f"{name}: in {MANIFEST} but not in {portable(folder)}" for name in sorted(set(entries) - set(files))]
    for name in sorted(set(files) & set(entries)):
        problems += _entry_problems(name, entries[name], folder, shipped, profile)
    return problems + (_commit_problems(entries) if profile == "evidence" else [])


def _commit_problems(entries: dict) -> list[str]:
    """One set of figures, one drawing: every entry from the same graftlib commit, none from a dirty tree."""
    commits = sorted({str((e.get("drawn_with") or {}).get("commit")) for e in entries.values()})
    out = [f"{name}: drawn from a dirty tree" for name, e in sorted(entries.items())
           if (e.get("drawn_with") or {}).get("dirty")]
    if len(commits) > 1:
        out.append(f"the figures were drawn at {len(commits)} commits ({', '.join(c[:8] for c in commits)}): "
                   f"redraw them all from one clean commit")
    return out
