"""The workbook: parameter validation, and every notebook end to end under papermill (smoke profile)."""

import ast

import pytest

from graftlib.core.errors import GraftError
from graftlib.data import packages
from graftlib.lab.workbook.runner import (
    COMMITTED_FIGURES,
    COUNTS,
    FIGURES_DIR,
    PROFILES,
    check_params,
    notebooks,
    run_workbook,
)


@pytest.mark.parametrize("kwargs,message", [
    ({"tasks": "gsm8k,nope"}, "unknown task 'nope'"),
    ({"tasks": "livecodebench"}, "livecodebench is not available offline"),
    ({"budgets": "4,-8"}, "budgets must lie in \\[1, 4096\\]"),
    ({"budgets": "four"}, "comma-separated integers"),
    ({"methods": "ar,beam"}, "unknown method 'beam'"),
    ({"beta": -0.1}, "beta=-0.1"),
    ({"n_prompts": 0}, "n_prompts=0"),
    ({"repeats": 0}, "repeats=0"),
    ({"profile": "huge"}, "profile='huge'"),
    ({"betas": "0,0.2,11"}, "betas='0,0.2,11': each value must lie in \\[0, 10\\]"),
    ({"betas": "0,x"}, "comma-separated numbers"),
    ({"budget": 0}, "parameter budget=0"),
    ({"cap": 5000}, "parameter cap=5000"),
    ({"grid": "2,0"}, "grid='2,0'"),
    ({"pools": "tdes,val"}, "unknown training pool 'val'"),
    ({"pools": " , "}, "data_pools is empty"),
    ({"saba_grid": "2,0"}, "saba_grid='2,0'"),
    ({"saba_prompts": 0}, "saba_prompts=0"),
    ({"tasks": "mbpp,gsm8k", "unseen_by": ("gsm8k",)}, "'gsm8k' is the task the scorer under test was trained on"),
    ({"tasks": "mbpp", "n_tasks": 0}, "n_tasks=0"),
])
def test_bad_parameters_are_named(kwargs, message):
    with pytest.raises(GraftError, match=message):
        check_params(**kwargs)


def test_good_parameters_parse():
    p = check_params(tasks="gsm8k, mbpp", budgets="4,8", chain_budgets="7", n_prompts=2, beta=0.2,
                     pools="tdes, drafter", repeats=3, saba_grid="2,4", saba_prompts=1)
    assert p == {"tasks": ["gsm8k", "mbpp"], "budgets": [4, 8], "chain_budgets": [7], "pools": ["tdes", "drafter"],
                 "repeats": 3, "saba_grid": [2, 4]}


def _runs_tasks(book, name: str, profile: dict) -> list[str]:
    """The tasks a notebook runs for its task-list parameter `name` under a profile's values."""
    import papermill as pm

    declared = pm.inspect_notebook(str(book))
    own = ast.literal_eval(declared[name]["default"])
    n = profile.get("n_tasks", ast.literal_eval(declared["n_tasks"]["default"]))
    return check_params(tasks=profile.get(name, own), n_tasks=n)["tasks"]


@pytest.mark.parametrize("profile", list(PROFILES))
def test_a_profile_shortens_a_notebooks_task_list_and_never_substitutes_one(profile):
    """Every notebook with a task list runs a prefix of its own list under every profile, and Figure 5 (its
    notebook and paper_regime's Figure 5) never GSM8K, the GSM8K-only scorer's training task, and the paper's three
    unseen tasks first, in its order (MBPP, SWE-bench, Alpaca)."""
    import papermill as pm

    assert "tasks" not in PROFILES[profile] and "transfer_tasks" not in PROFILES[profile]
    for book in notebooks():
        declared = pm.inspect_notebook(str(book))
        for name in ("tasks", "transfer_tasks"):
            if name in declared:
                own = [t.strip() for t in ast.literal_eval(declared[name]["default"]).split(",")]
                runs = _runs_tasks(book, name, PROFILES[profile])
                assert runs == own[:len(runs)] and runs, (book.stem, name)
                if (book.stem, name) in (("fig5_generalization", "tasks"), ("paper_regime", "transfer_tasks")):
                    assert "gsm8k" not in runs and own[:3] == ["mbpp", "swe-bench", "alpaca"], (profile, book.stem)


def test_every_notebook_has_a_parameters_cell_of_primitives():
    import nbformat
    import papermill as pm

    books = notebooks()
    assert books, "no notebooks found"
    for book in books:
        nb = nbformat.read(book, as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{book.name}: expected one cell tagged 'parameters'"
        declared = pm.inspect_notebook(str(book))
        assert "profile" in declared and "results_dir" in declared and "figures_dir" in declared, book.name
        assert ast.literal_eval(declared["figures_dir"]["default"]) == FIGURES_DIR, book.name  # the manifest's folder
        for name, p in declared.items():
            value = ast.literal_eval(p["default"])
            assert isinstance(value, str | int | float | bool), f"{book.name}: {name} is not a primitive"
        for profile in PROFILES.values():
            missing = [k for k in declared if k not in profile and k not in ("target", "drafter", "selector_drafter",
                                                                                "results_dir",
                                                                                "figures_dir", "gsm8k_scorer",
                                                                                "cost_profile", "dtype",
                                                                                "tasks", "transfer_tasks")]
            assert not missing, f"{book.name}: profile {profile['profile']} sets no value for {missing}"


INTERACTIVE = ("slider",)  # widgets of a notebook run by hand, off in every batch profile; not a setting


def test_notebook_defaults_are_the_quick_profiles_settings():
    """A notebook run by hand with its defaults makes the quick profile's runs (a profile changes counts, never
    settings), so notebooks that share a bench share it in fact."""
    import papermill as pm

    quick = PROFILES["quick"]
    for book in notebooks():
        declared = pm.inspect_notebook(str(book))
        differ = {k: (ast.literal_eval(p["default"]), quick[k]) for k, p in declared.items()
                  if k in quick and k not in INTERACTIVE and ast.literal_eval(p["default"]) != quick[k]}
        assert not differ, f"{book.name}: defaults differ from the quick profile's: {differ}"

def test_the_notebook_that_reads_the_others_benches_runs_last():
    from graftlib.lab.workbook.runner import LAST

    names = [b.stem for b in notebooks()]
    assert names[-len(LAST):] == list(LAST) and names[:-len(LAST)] == sorted(names[:-len(LAST)])


def test_figure_titles_are_two_plain_lines():
    """`figure_title`: what is compared, then pair, machine, dtype and counts; nothing else."""
    from graftlib.lab.workbook.plots.layout import figure_title

    desc = {"target": "smollm2-135m", "drafter": "embedded", "drafter_trained": True,
            "hardware": "2-core AMD EPYC, AVX512-BF16", "dtype": "float32"}
    assert figure_title("Table 1: MAT", desc, prompts_per_task=2, new_tokens=64).splitlines() == [
        "Table 1: MAT", ("smollm2-135m + embedded drafter on 2-core AMD EPYC, AVX512-BF16, float32; "
                         "prompts per task 2, new tokens 64")]
    assert "embedded (untrained) drafter" in figure_title("x", {**desc, "drafter_trained": False})


def test_notebook_figure_titles_are_short_and_name_no_ids_or_rules():
    """Every figure title a notebook builds goes through `figure_title` with a first line of at most 110
    characters and no artifact ids, cost profiles or ranking rules (those live in figures/manifest.json
    and the notes beside a table's CSV)."""
    import nbformat

    titled = 0
    for book in notebooks():
        src = "\n".join(c.source for c in nbformat.read(book, as_version=4).cells if c.cell_type == "code")
        assert "wrap_title" not in src and "caption(" not in src, f"{book.name}: a title outside figure_title"
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "figure_title":
                titled += 1
                what = node.args[0]
                text = what.value if isinstance(what, ast.Constant) else "".join(
                    v.value if isinstance(v, ast.Constant) else "{}" for v in what.values)
                assert len(text) <= 110 and "\n" not in text, f"{book.name}: title line too long: {text!r}"
                banned = {k.arg for k in node.keywords} & {"cost_profile", "calibration", "profile", "rule"}
                assert not banned, f"{book.name}: {banned} in a figure title"
                assert not any(isinstance(a, ast.Attribute) and a.attr == "caption" for a in ast.walk(node)), \
                    f"{book.name}: a table's ranking caption in a figure title"
    assert titled >= 10


needs_data = pytest.mark.skipif(not all(packages.cache_status().values()),
                                reason="prompt sets not fetched (make data)")


@needs_data
@pytest.mark.slow(seconds=400)
@pytest.mark.parametrize("dtype", ["", "bfloat16"])
def test_smoke_profile_runs_every_notebook(tmp_path, dtype):
    """Once as on a CPU (float32) and once in bfloat16, the GPU path's numerics: there decodes may leave
    AR's tokens at certified ties, and every notebook must still complete."""
    figs = tmp_path / "figures"
    rows = run_workbook("smoke", tmp_path / "out", extra={"results_dir": str(tmp_path / "results"),
                                                          "figures_dir": str(figs), "dtype": dtype})
    assert [r["status"] for r in rows] == ["ok"] * len(rows), rows
    declared = [b for b in notebooks() if "dtype" in (tmp_path / "out" / b.name).read_text()]
    assert len(declared) >= 9  # every notebook that loads a pair took the dtype
    assert (tmp_path / "out" / "summary.md").is_file()
    assert list(figs.glob("*.png")) and list(figs.glob("*.pdf"))


@needs_data
@pytest.mark.slow
def test_bad_notebook_parameter_stops_in_first_cell(tmp_path):
    rows = run_workbook("smoke", tmp_path / "out", only=[notebooks()[0].stem],
                        extra={"tasks": "nope", "task": "nope", "results_dir": str(tmp_path / "r"),
                               "figures_dir": str(tmp_path / "f")})
    assert rows[0]["status"] == "failed"
    assert "GraftError" in rows[0]["error"] and "unknown task 'nope'" in rows[0]["error"]


def test_progress_bars_over_notebooks_and_cells(tmp_path, monkeypatch, capsys):
    """The runner shows a bar over the profile's notebooks and papermill's bar over the running one's
    cells (on stderr), and one line per finished notebook above them (on stdout)."""
    import nbformat

    from graftlib.lab.workbook import runner as workbook

    books = tmp_path / "notebooks"
    books.mkdir()
    for name, code in (("a_first", "x = 1"), ("b_second", "raise ValueError('boom')")):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("y = 2"), nbformat.v4.new_code_cell(code)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, books / f"{name}.ipynb")
    monkeypatch.setattr(workbook, "NOTEBOOK_DIR", books)
    rows = run_workbook("smoke", tmp_path / "out")
    assert [r["status"] for r in rows] == ["ok", "failed"]
    out, err = capsys.readouterr()
    assert "workbook smoke" in err and "2/2" in err and "notebook" in err  # the bar over notebooks
    assert "a_first" in err and "cell" in err and "2/2 [" in err  # papermill's bar over cells
    assert "[    ok] a_first" in out and "[failed] b_second" in out and "ValueError: boom" in out


def test_smoke_figures_never_land_in_the_committed_folder(tmp_path):
    from graftlib.lab.workbook.runner import profile_values

    assert profile_values("smoke", tmp_path)["figures_dir"] == str(tmp_path / "figures")
    assert profile_values("smoke", tmp_path, {"figures_dir": "x"})["figures_dir"] == "x"
    assert "figures_dir" not in profile_values("quick", tmp_path)  # the notebooks' default: results/figures/
    drawn_into = {name: profile_values(name, tmp_path).get("figures_dir", FIGURES_DIR) for name in PROFILES}
    assert [n for n, d in drawn_into.items() if d == COMMITTED_FIGURES] == ["evidence"]  # make main never draws there
    evidence, quick = PROFILES["evidence"], PROFILES["quick"]
    assert evidence["n_prompts"] >= 10 and evidence["max_new_tokens"] >= 128 and evidence["n_tasks"] >= 3
    own = ("profile", *COUNTS, "regime_names", "gains")  # the evidence runs quick's settings, at its own counts, and
    # quick's regimes with the third regime under every drafter-strength calibration, the tree-gain axis at more points
    assert set(quick["regime_names"].split(",")) < set(evidence["regime_names"].split(","))
    assert {k: v for k, v in evidence.items() if k not in (*own, "figures_dir", "results_dir")} == {
        k: v for k, v in quick.items() if k not in own}
