"""The README and docs/ pages stay runnable: every `graft ...` command they show parses with the
CLI's own parser (an unknown or renamed option fails here, not in a newcomer's terminal), and
every local link and image they name exists."""

import re
import shlex
from pathlib import Path

import pytest

from graftlib.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) for each `graft ...` in inline code or at the start of a code-block line."""
    found = []
    for page in PAGES:
        text = page.read_text()
        lines = [m.group(1) for m in re.finditer(r"`(graft [^`]+)`", text)]
        for ln in text.splitlines():  # a code line: `graft ...  # comment;  graft ...` holds one or two
            lines += [part for part in ln.replace("#", ";").split(";") if part.strip().startswith("graft ")]
        found += [(page.name, ln.strip()) for ln in lines if "..." not in ln and ln.split()[1] != "bench:"]
    return found


@pytest.mark.parametrize("page,command", shown_commands())
def test_shown_graft_commands_parse(page, command):
    argv = shlex.split(command)[1:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        raise AssertionError(f"{page}: `{command}` does not parse") from e


def test_local_links_exist():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_readme_is_one_newcomers_page_citing_the_paper():
    text = (ROOT / "README.md").read_text()
    assert len(text) <= 10000, f"README.md has {len(text)} characters; move detail into docs/"  # 8000 + results
    assert "GRAFT: Adaptive DLM-Based Draft Tree Construction with\nTarget-Distilled Edge Scoring" in text
    assert all(f"docs/{p.name}" in text for p in (ROOT / "docs").glob("*.md")), "every docs page is linked"


STORY = re.compile(r"\bsessions?\b|\blent\b|device tool|device machine|workplace", re.IGNORECASE)


def test_the_project_describes_itself_not_the_story_of_its_making():
    """Code, notebooks, the Makefile, the experiment scripts, the README and the docs speak of the project, its
    commands, commits and dates, never of numbered working periods or of which machine was available when."""
    files = [*(ROOT / "graftlib").rglob("*.py"), *(ROOT / "graftlib" / "assets").rglob("*.json"),
             *(ROOT / "notebooks").glob("*.ipynb"), ROOT / "README.md", ROOT / "Makefile",
             *(ROOT / "experiments").glob("*.sh"), *(ROOT / "docs").glob("*.md")]
    hits = [f"{f.relative_to(ROOT)}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
            if STORY.search(line)]
    assert not hits, hits


def _table_blocks(text: str) -> list[list[str]]:
    """Runs of consecutive lines starting with '|' (outside code blocks)."""
    blocks, current, code = [], [], False
    for line in text.splitlines():
        code = code != line.startswith("```")
        if line.startswith("|") and not code:
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    return blocks + ([current] if current else [])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_table_has_its_header_and_rows_of_its_width(page):
    """A table split by a paragraph leaves rows without a header, which a renderer shows as plain text."""
    for block in _table_blocks(page.read_text()):
        assert len(block) >= 2 and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", block[1].replace(" ", "")), (
            f"{page.name}: a table without its header and separator line: {block[0][:80]}")
        width = block[0].count("|")
        assert all(row.count("|") - row.count("\\|") - row.count("`|") >= width - 1 for row in block), page.name


def test_a_split_table_is_caught():
    split = "| a | b |\n|---|---|\n| 1 | 2 |\n\nA paragraph.\n| 3 | 4 |\n"
    blocks = _table_blocks(split)
    assert len(blocks) == 2 and not re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", blocks[1][-1])


HISTORY = re.compile(r"\b[Ii]ssues? #?\d+|\bFACTS\b|\.\./shared")


def test_no_issue_numbers_or_outside_files_are_cited():
    """Code, notebooks, docs and scripts explain themselves: no issue numbers, no files outside the repository."""
    roots = [ROOT / "graftlib", ROOT / "notebooks", ROOT / "docs", ROOT / "experiments", ROOT / "tests"]
    files = [ROOT / "README.md", ROOT / "Makefile",
             *(p for r in roots for p in r.rglob("*") if p.suffix in (".py", ".ipynb", ".md", ".sh"))]
    cited = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files if p != Path(__file__)
             for m in HISTORY.finditer(p.read_text(errors="replace"))]
    assert not cited, cited[:10]


def test_the_results_section_is_the_committed_claims_table():
    """The README's results block is what `graft results` makes of figures/claims_by_regime.csv: it cannot drift."""
    import pandas as pd

    from graftlib.lab.workbook.readme_results import CLAIMS_CSV, END, START, results_section

    text = (ROOT / "README.md").read_text()
    block = START + text.split(START, 1)[1].split(END, 1)[0] + END
    assert block == results_section(pd.read_csv(ROOT / CLAIMS_CSV, index_col=0))
    assert text.index("## Results") < text.index("## Three commands")  # what a reader sees first


def test_the_results_section_counts_verdicts_and_names_the_construction():
    import pandas as pd

    from graftlib.core.errors import GraftError
    from graftlib.lab.workbook.readme_results import results_section

    C = pd.DataFrame({"paper": ["GRAFT beats DDTree", "SABA tracks the oracle"],
                      "machine wall-clock": ["opposite (0.915x [0.883, 0.951] vs the paper's 1.209x)", "inside noise"],
                      "paper modeled": ["direction only (1.037x [1.016, 1.058] vs the paper's 1.209x)", None],
                      "paper+acceptance modeled": ["reproduced (1.30x [1.2, 1.4] vs the paper's 1.209x)",
                                                   ("not tested (best budget at the grid's edge) "
                                                   "(SABA / best fixed B=4)")]},
                     index=["C1", "F6b"])
    md = results_section(C)
    assert "| C1 | GRAFT beats DDTree | opposite (0.915x) | direction only (1.037x) | reproduced (1.30x) |" in md
    assert ("| F6b | SABA tracks the oracle | inside noise | - | not tested (best budget at the grid's edge) "
            "(SABA / best fixed B=4) |") in md
    assert "come out 1 inside noise, 1 opposite" in md
    assert "every `reproduced` there (C1) rests on the drafter-strength" in md
    with pytest.raises(GraftError, match="no column"):
        results_section(C.drop(columns="paper modeled"))


def test_the_results_section_shows_the_pinned_and_robust_columns_where_the_table_has_them():
    import pandas as pd

    from graftlib.lab.workbook.readme_results import results_section

    C = pd.DataFrame({"paper": ["GRAFT beats DDTree", "+TDES beats DDTree"],
                      "machine wall-clock": ["opposite (0.9x)", "inside noise (1.0x)"],
                      "paper modeled": ["direction only (1.04x)", "inside noise (1.0x)"],
                      "paper+acceptance modeled": ["reproduced (1.3x)", "inside noise (1.0x)"],
                      "paper+pinned modeled": ["reproduced (1.25x)", "direction only (1.03x)"],
                      "paper+true-path modeled": ["reproduced (1.4x)", "reproduced (1.06x)"],
                      "paper+acceptance robust": ["reproduced", "depends on the drafter's tree gain (...)"]},
                     index=["C1", "C4"])
    md = results_section(C)
    assert "| paper's costs + acceptance, pinned (**construction**, modeled) | the same under all three" in md
    assert ("| C1 | GRAFT beats DDTree | opposite (0.9x) | direction only (1.04x) | reproduced (1.25x) | reproduced "
            "|") in md
    assert "come out 1 reproduced, 1 direction only: every `reproduced` there (C1)" in md  # the pinned column's
    assert ("1 of the 2 claims keep their verdict under all three constructions of the paper's acceptance "
            "(1 reproduced); 1 depend on the drafter's tree gain over its chain (C4).") in md


def test_the_readme_lists_the_workbook_and_its_measured_times():
    """The README's workbook block is generated: every notebook of the workbook's registry, in its order, and the
    `make main` / `make test` times of docs/timings.json (measured from a fresh clone); a notebook added, renamed or
    retitled, or a new timing, fails here until `graft results --readme README.md` is run."""
    import json

    from graftlib.lab.workbook.readme_results import NB_END, NB_START, TIMINGS, workbook_section
    from graftlib.lab.workbook.runner import notebooks

    readme = (ROOT / "README.md").read_text()
    block = NB_START + readme.split(NB_START, 1)[1].split(NB_END, 1)[0] + NB_END
    assert block == workbook_section()
    listed = block.split("in the order a profile runs them: ")[1].split(".")[0].replace("`", "").split(", ")
    assert listed == [b.stem for b in notebooks()]
    timings = json.loads((ROOT / TIMINGS).read_text())
    assert f"{timings['make main']['minutes']:.0f} min" in block and timings["make main"]["commit"] in block
