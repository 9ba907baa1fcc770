"""The figures manifest: the workbook records what each notebook drew, and `check_figures` holds the
committed figures to the shipped artifacts.

Two throwaway notebooks (one draws, one does not) run through `run_workbook` into a temporary
figures folder: the drawing one's files get entries, `drawn_with` is asked once, and the check
passes against (a copy of) the shipped artifacts; then each way a figure can stop being what
`make main` draws from them (redrawn by hand, another profile, another drafter, calibration,
scorer, cost profile or EAGLE-3 drafter, a file drawn outside the workbook, a missing file) is named. The committed
figures are checked once `make artifacts` has written figures/manifest.json.
"""

import shutil

import nbformat
import pytest

from graftlib.core.paths import PROJECT_DIR
from graftlib.inputs.artifacts import ShippedAssets
from graftlib.lab.workbook import figures_manifest
from graftlib.lab.workbook import runner as workbook
from graftlib.lab.workbook.figures_manifest import (
    check_figures,
    drawn_with,
    git_commit,
    read_manifest,
    record,
    shipped_ids,
)
from graftlib.models.eagle3 import checkpoint_id

FIGURES = PROJECT_DIR / workbook.COMMITTED_FIGURES


@pytest.fixture
def assets(tmp_path) -> ShippedAssets:
    """The shipped scorers, calibration and AR drafter cost, copied, and stand-in EAGLE-3 and DFlash 2 checkpoints
    (their ids are their files' bytes; the real drafters stay behind)."""
    for sub in ("tdes", "saba", "costs"):
        shutil.copytree(ShippedAssets().root / sub, tmp_path / "assets" / sub)
    out = ShippedAssets(tmp_path / "assets")
    for drafter in (out.eagle3, out.dflash2):
        drafter.mkdir(parents=True)
        (drafter / "config.json").write_text("{}")
        (drafter / "model.safetensors").write_bytes(drafter.name.encode())
    return out


def test_the_eagle3_notebooks_are_those_that_run_or_read_the_eagle3_drafter():
    calls = {p.stem for p in workbook.notebooks()
             if "ar_baseline_runs(" in p.read_text() or "EMBEDDED_EAGLE3_DIR" in p.read_text()}
    assert calls == figures_manifest.EAGLE3_NOTEBOOKS


def test_the_paper_notebooks_are_those_that_decide_in_the_paper_regime():
    import re

    calls = {p.stem for p in workbook.notebooks() if re.search(r"\b(paper|named)\(", p.read_text())}
    assert calls == figures_manifest.PAPER_NOTEBOOKS


def test_the_dflash2_notebooks_are_those_that_set_tdes_beside_the_selector():
    calls = {p.stem for p in workbook.notebooks() if "edge_score_records(" in p.read_text()}
    assert calls == figures_manifest.DFLASH2_NOTEBOOKS


def test_an_eagle3_checkpoint_id_names_its_files(tmp_path, assets):
    first = checkpoint_id(assets.eagle3)
    assert len(first) == 12 and checkpoint_id(tmp_path) is None  # no weights: no id
    (assets.eagle3 / "model.safetensors").write_bytes(b"retrained")
    assert checkpoint_id(assets.eagle3) != first


@pytest.mark.skipif(not (FIGURES / "manifest.json").is_file(), reason="figures/manifest.json not written yet "
                    "(make artifacts)")
def test_committed_figures_are_what_make_main_draws_from_the_shipped_artifacts():
    assert check_figures(FIGURES) == []


def test_by_default_the_notebooks_draw_with_the_shipped_artifacts(monkeypatch):
    """On the machine the shipped cost profile was fitted on (elsewhere the notebooks price with that machine's,
    `graftlib.lab.run.costs.machine_costs`)."""
    from graftlib.inputs.cost_profile import default_profile
    from graftlib.lab.run.costs import machine_costs

    monkeypatch.delenv("GRAFT_TDES", raising=False)
    monkeypatch.delenv("GRAFT_SABA_PARAMS", raising=False)
    monkeypatch.setattr(machine_costs, "hardware_id", lambda device, dtype=None: default_profile().hardware)
    used = drawn_with(workbook.PROFILES["quick"])
    keys = ("pair", "tdes", "saba", "saba_paper", "saba_paper_acceptance", "cost_profile", "eagle3", "dflash2")
    assert {k: used[k] for k in keys} == shipped_ids()
    assert used["commit"] is None or len(used["commit"]) == 40


def notebook(path, code: str) -> None:
    params = nbformat.v4.new_code_cell('figures_dir = "figures"\nprofile = "quick"')
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_the_workbook_records_what_each_notebook_draws(tmp_path, monkeypatch, assets):
    books = tmp_path / "notebooks"
    books.mkdir()
    notebook(books / "a_draws.ipynb", "from pathlib import Path\n"
             "for n in ('a.png', 'a.csv'): Path(figures_dir, n).write_text(n)")
    notebook(books / "b_draws_nothing.ipynb", "x = 1")
    monkeypatch.setattr(workbook, "NOTEBOOK_DIR", books)
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "README.md").write_text("not a figure")
    asked = []

    def drawn_with(values):
        asked.append(values["figures_dir"])
        return shipped_ids(assets)

    rows = workbook.run_workbook("quick", tmp_path / "out", extra={"figures_dir": str(figs)}, progress=False,
                                 drawn_with=drawn_with)
    assert [r["status"] for r in rows] == ["ok", "ok"] and asked == [str(figs)]
    entries = read_manifest(figs)["figures"]
    assert sorted(entries) == ["a.csv", "a.png"]
    assert {(e["notebook"], e["profile"]) for e in entries.values()} == {("a_draws", "quick")}
    assert check_figures(figs, assets, profile="quick") == []


def test_check_figures_names_every_figure_that_is_not_make_mains(tmp_path, assets):
    figs = tmp_path / "figs"
    figs.mkdir()
    missing = check_figures(figs, assets)
    assert len(missing) == 1 and "manifest.json does not exist: run `make main`" in missing[0]
    shipped = shipped_ids(assets)
    names = ["ok.png", "edited.csv", "full.png", "drafter.png", "saba.png", "scorer.pdf", "cost.png", "gone.png",
             "eagle3.png", "no-eagle3.png", "dflash2.png", "acceptance.png", "before-acceptance.png"]
    for name in names:
        (figs / name).write_text(name)
    record(figs, names, "nb", "quick", shipped)
    assert check_figures(figs, assets, profile="quick") == []
    record(figs, ["full.png"], "nb", "full", shipped)
    record(figs, ["drafter.png"], "nb", "quick", {**shipped, "pair": {**shipped["pair"],
                                                                       "drafter_fingerprint": "0" * 12}})
    record(figs, ["saba.png"], "nb", "quick", {**shipped, "saba": "0" * 12})
    record(figs, ["scorer.pdf"], "nb", "quick", {**shipped, "tdes": {**shipped["tdes"], "gsm8k": "0" * 12}})
    record(figs, ["cost.png"], "nb", "quick", {**shipped, "cost_profile": "0" * 12})
    record(figs, ["eagle3.png"], "table1_main_results", "quick", {**shipped, "eagle3": "0" * 12})
    record(figs, ["no-eagle3.png"], "fig5_generalization", "quick", {**shipped, "eagle3": "0" * 12})  # not read
    record(figs, ["dflash2.png"], "table2_components", "quick", {**shipped, "dflash2": "0" * 12})
    record(figs, ["acceptance.png"], "table1_main_results", "quick", {**shipped, "saba_paper_acceptance": "0" * 12})
    before = {k: v for k, v in shipped.items() if k != "saba_paper_acceptance"}  # drawn before those parts existed
    record(figs, ["before-acceptance.png"], "table1_main_results", "quick", before)
    (figs / "edited.csv").write_text("edited by hand")
    (figs / "gone.png").unlink()
    (figs / "stray.png").write_text("drawn outside the workbook")
    problems = check_figures(figs, assets, profile="quick")
    expected = ["stray.png: not in manifest.json", "gone.png: in manifest.json but not in",
                "edited.csv: changed since nb drew it", "full.png: drawn with profile 'full', not 'quick'",
                "drafter.png: drawn with the pair", "saba.png: drawn with saba 000000000000",
                "scorer.pdf: drawn with the gsm8k TDES scorer 000000000000", "cost.png: drawn with cost_profile",
                "eagle3.png: drawn with the EAGLE-3 drafter 000000000000",
                "dflash2.png: drawn with the DFlash 2 drafter 000000000000",
                "acceptance.png: drawn with saba_paper_acceptance 000000000000"]
    assert len(problems) == len(expected), problems
    for start in expected:
        assert any(p.startswith(start) for p in problems), (start, problems)


def test_check_figures_wants_the_evidence_figures_from_one_clean_commit(tmp_path, assets):
    figs = tmp_path / "figs"
    figs.mkdir()
    for name in ("a.png", "b.png", "c.png"):
        (figs / name).write_text(name)
    shipped = shipped_ids(assets)
    clean = {**shipped, "commit": "a" * 40, "dirty": False}
    record(figs, ["a.png", "b.png", "c.png"], "nb", "evidence", clean)
    assert check_figures(figs, assets, profile="evidence") == []
    record(figs, ["b.png"], "nb", "evidence", {**clean, "dirty": True})
    record(figs, ["c.png"], "nb", "evidence", {**clean, "commit": "b" * 40})
    assert check_figures(figs, assets, profile="quick") == [f"{n}: drawn with profile 'evidence', not 'quick'"
                                                            for n in ("a.png", "b.png", "c.png")]
    problems = check_figures(figs, assets, profile="evidence")
    assert problems == ["b.png: drawn from a dirty tree",
                        ("the figures were drawn at 2 commits (aaaaaaaa, bbbbbbbb): redraw them all from one clean "
                        "commit")]


def test_a_tree_is_dirty_by_its_code_not_by_the_figures_a_redraw_rewrites(tmp_path):
    """A redraw rewrites figures/ before its later notebooks ask (a changed CSV is the drawing, not dirt); a changed
    source file is dirt; no repository: unknown."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    assert git_commit(tmp_path) == {"commit": None, "dirty": None}
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "a.csv").write_text("x\n1\n")
    (tmp_path / "code.py").write_text("A = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    assert git_commit(tmp_path)["dirty"] is False and len(git_commit(tmp_path)["commit"]) == 40
    (tmp_path / "figures" / "a.csv").write_text("x\n2\n")
    assert git_commit(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("A = 2\n")
    assert git_commit(tmp_path)["dirty"] is True


def test_grid_edges_name_every_best_budget_its_grid_does_not_bracket(tmp_path):
    import pandas as pd

    from graftlib.lab.workbook.grid_check import grid_edges

    pd.DataFrame({"method": ["DDTree", "DDTree", "GRAFT"], "budget": [8, 4, 64], "grid": ["4,8,16", "4,8,16", ""]}
                 ).to_csv(tmp_path / "table1.csv", index=False)
    pd.DataFrame({"run": ["CPU set"], "best fixed budget": [32.0], "grid": ["4,8,16,32"]}).to_csv(
        tmp_path / "fig6.csv", index=False)
    pd.DataFrame({"task": ["gsm8k", "gsm8k"], "run": ["ddtree@16", "ddtree@2"], "grid": ["", "2,4,8"]}).to_csv(
        tmp_path / "table2_per_task.csv", index=False)  # no budget column: the run's key names the budget
    sweep = [("paper", g, b, t) for g, best in (("hard", 16), ("easy", 4)) for b, t in
             ((4, 1.0 + (best == 4)), (8, 1.5), (16, 1.2 + (best == 16)), (32, 1.1))]
    pd.DataFrame(sweep, columns=["regime", "group", "B", "m_tps"]).to_csv(tmp_path / "fig1c.csv", index=False)
    problems = grid_edges(tmp_path)
    assert len(problems) == 4, problems
    assert any("table2_per_task.csv: gsm8k's best budget 2" in p for p in problems)
    assert any("fig1c.csv: paper/easy best B=4 by m_tps" in p for p in problems)
    assert any("fig6.csv: CPU set's best budget 32" in p for p in problems)
    assert any("table1.csv: DDTree's best budget 4" in p for p in problems)
    assert not any("hard" in p or "budget 8 " in p for p in problems)  # bracketed bests pass


def test_every_committed_best_budget_lies_inside_its_grid():
    from graftlib.lab.workbook.grid_check import grid_edges

    assert grid_edges(FIGURES) == []
