"""The layering of graftlib: imports only go down `graftlib.LAYERS`, and no import cycle exists.

The checker (`tests/layering.py`) reads every module's imports with `ast`, module level and
inside functions, absolute and relative. The fault-injection tests run it on a copy of the
source tree with one upward import added, to show that it fails when the layering breaks.
"""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from layering import cycles, import_graph, upward_imports

import graftlib
from graftlib import LAYERS

PACKAGE = Path(graftlib.__file__).parent


def test_imports_only_go_down_the_layers():
    assert upward_imports(import_graph(PACKAGE), LAYERS) == []


ROOMS = {  # within a layer, its rooms and the rooms each may not import
    "graftlib.lab.report": ("graftlib.lab.run", "graftlib.lab.workbook"),
    "graftlib.lab.run": ("graftlib.lab.workbook",),
    "graftlib.training.drafter": ("graftlib.training.graft", "graftlib.training.prepare", "graftlib.training.ship"),
    "graftlib.training.graft": ("graftlib.training.drafter", "graftlib.training.prepare", "graftlib.training.ship"),
}


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per import of a room from a room it may not import (`ROOMS`)."""
    out = []
    for module, targets in sorted(graph.items()):
        for room, banned in ROOMS.items():
            if module == room or module.startswith(room + "."):
                out += [f"{module} imports {t}" for t in sorted(targets) if t.startswith(banned)]
    return out


def test_rooms_import_only_the_rooms_below_them():
    """lab: report < run < workbook; training: the drafter and graft rooms apart, prepare and ship above both."""
    graph = import_graph(PACKAGE)
    assert all(any(m.startswith(r) for m in graph) for r in ROOMS), "a room of ROOMS is missing"
    assert room_violations(graph) == []
    assert room_violations({"graftlib.lab.report.claims": {"graftlib.lab.run.bench"}}) == [
        "graftlib.lab.report.claims imports graftlib.lab.run.bench"]


def test_no_import_cycles():
    found = cycles(import_graph(PACKAGE))
    print(f"import cycles: {len(found)}")
    assert found == [], f"{len(found)} import cycle(s): {found}"


def test_every_layer_is_a_subpackage_with_its_docstring():
    for layer in LAYERS:
        init = PACKAGE / layer / "__init__.py"
        assert init.is_file(), f"layer {layer} has no package"
        assert "May import:" in init.read_text(), f"{init} does not say what it may import"


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_reader_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "pkg"
    for rel in ("__init__.py", "a.py", "b.py", "c.py", "d.py", "sub/__init__.py", "sub/e.py", "sub/f.py"):
        write(pkg, rel, "")
    write(pkg, "sub/m.py", """
        import pkg.a
        from pkg.b import name_in_b
        from . import e
        from .f import name_in_f


        def late():
            from .. import c
            from ..d import name_in_d
            import json
            return c, name_in_d, json
        """)
    assert import_graph(pkg)["pkg.sub.m"] == {"pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.sub.e", "pkg.sub.f"}


def test_cycles_are_found_across_function_imports(tmp_path):
    pkg = tmp_path / "pkg"
    write(pkg, "__init__.py", "")
    write(pkg, "a.py", "from pkg import b\n")
    write(pkg, "b.py", "def f():\n    from pkg.c import x\n")
    write(pkg, "c.py", "import pkg.a\nx = 1\n")
    write(pkg, "d.py", "import pkg.a\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]


@pytest.fixture
def source_copy(tmp_path) -> Path:
    """A copy of graftlib's Python sources (no assets) to inject faults into."""
    dst = tmp_path / "graftlib"
    shutil.copytree(PACKAGE, dst, ignore=shutil.ignore_patterns("assets", "__pycache__"))
    assert upward_imports(import_graph(dst), LAYERS) == [] and cycles(import_graph(dst)) == []
    return dst


def test_injected_upward_import_inside_a_function_fails(source_copy):
    """core.tree reaching up into the benchmark: reported as upward, and it closes a cycle
    (bench -> methods.decoder -> core.decode -> core.tree -> bench)."""
    with (source_copy / "core" / "tree.py").open("a") as f:
        f.write("\n\ndef _injected():\n    from graftlib.lab.run.bench import Run\n    return Run\n")
    graph = import_graph(source_copy)
    assert upward_imports(graph, LAYERS) == [
        "graftlib.core.tree (core) imports graftlib.lab.run.bench (lab): an upward import"]
    found = cycles(graph)
    assert len(found) == 1 and {"graftlib.core.tree", "graftlib.lab.run.bench", "graftlib.core.decode"} <= set(found[0])


def test_injected_relative_upward_import_fails(source_copy):
    verify = source_copy / "core" / "verify.py"
    verify.write_text(verify.read_text() + "\nfrom ..methods import registry  # noqa\n")
    assert upward_imports(import_graph(source_copy), LAYERS) == [
        "graftlib.core.verify (core) imports graftlib.methods.registry (methods): an upward import"]


def test_module_outside_the_layers_fails(source_copy):
    write(source_copy, "stray.py", "from graftlib.core import tree\n")
    assert upward_imports(import_graph(source_copy), LAYERS) == [
        f"graftlib.stray is in no layer (layers: {', '.join(LAYERS)})"]


def test_package_and_prompt_sets_import_without_torch():
    """The public face is lazy and the prompt sets need no model code: neither loads torch."""
    code = "import sys, graftlib, graftlib.data.prompts; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent)
    assert out.stdout.strip() == "False"


def test_public_face():
    from graftlib.methods.decoder import Decoder
    from graftlib.models.pair import load_pair

    assert graftlib.Decoder is Decoder and graftlib.load_pair is load_pair
    assert "graft" in graftlib.METHODS
    with pytest.raises(AttributeError):
        graftlib.no_such_name  # noqa: B018


MAX_MODULES, MAX_DOCSTRING, MAX_FUNCTION = 12, 25, 80  # what a reader takes in at once
MAX_PARAMS, MAX_LINES = 8, 500  # a call a reader reads whole; a module a reader reads whole


def _params(node) -> int:
    """A function's parameters, `self` / `cls` not counted."""
    a = node.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    own = 1 if names and names[0].arg in ("self", "cls") else 0
    return len(names) - own + (a.vararg is not None) + (a.kwarg is not None)


def house_problems(root: Path) -> list[str]:
    """One line per folder (but `core/`) with more than MAX_MODULES modules directly in it, module over MAX_LINES
    lines, module docstring over MAX_DOCSTRING lines, function over MAX_FUNCTION lines and function with more than
    MAX_PARAMS parameters under the package dir `root`."""
    import ast
    from collections import Counter

    out = []
    folders = Counter(p.parent for p in root.rglob("*.py") if p.name != "__init__.py")
    out += [f"{d.relative_to(root)}/ holds {n} modules" for d, n in sorted(folders.items())
            if n > MAX_MODULES and d != root / "core"]
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        if len(text.splitlines()) > MAX_LINES:
            out.append(f"{path.relative_to(root)}: {len(text.splitlines())} lines")
        doc = ast.get_docstring(tree, clean=False) or ""
        if len(doc.splitlines()) > MAX_DOCSTRING:
            out.append(f"{path.relative_to(root)}: a {len(doc.splitlines())}-line module docstring")
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        out += [f"{path.relative_to(root)}: {node.name} is {node.end_lineno - node.lineno + 1} lines"
                for node in functions if node.end_lineno - node.lineno + 1 > MAX_FUNCTION]
        out += [f"{path.relative_to(root)}: {node.name} takes {_params(node)} parameters"
                for node in functions if _params(node) > MAX_PARAMS]
    return out


def test_folders_modules_and_functions_stay_small():
    assert house_problems(PACKAGE) == []


def test_house_problems_are_reported(tmp_path):
    pkg = tmp_path / "pkg"
    for i in range(MAX_MODULES + 1):
        write(pkg, f"room/m{i}.py", "")
    write(pkg, "long_doc.py", '"""' + "line\n" * (MAX_DOCSTRING + 1) + '"""\n')
    write(pkg, "long_fn.py", "def f():\n" + "    x = 1\n" * MAX_FUNCTION)
    write(pkg, "wide.py", "class C:\n    def m(self, a, b, c, d, e, f, g, h):\n        pass\n\n\n"
                          "def w(a, b, c, d, e, f, g, *h, i):\n    pass\n")
    write(pkg, "long_module.py", "x = 1\n" * (MAX_LINES + 1))
    assert house_problems(pkg) == ["room/ holds 13 modules", "long_doc.py: a 26-line module docstring",
                                   "long_fn.py: f is 81 lines", "long_module.py: 501 lines",
                                   "wide.py: w takes 9 parameters"]


def test_docs_layout_names_every_module():
    """A newcomer finds every module in docs/layout.md: its name in backticks, or as a path."""
    import re

    doc = (PACKAGE.parent / "docs" / "layout.md").read_text()
    missing = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__init__.py"
               and not re.search(rf"(`|/){re.escape(p.stem)}(`| \(|\.py|,)", doc)]
    assert missing == [], f"docs/layout.md does not name {missing}"
