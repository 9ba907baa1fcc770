"""The import graph of a package source tree, read with `ast`, and its two checks.

`import_graph(root)` maps every module under `root` (a package directory) to the package modules
it imports: module-level imports and imports inside functions alike, `import x` and
`from x import y`, absolute and relative. `from x import y` names the module `x.y` when that is a
module, else `x`. Parent packages that Python imports implicitly are not edges (a subpackage's
`__init__` is reached only when it is named).

`upward_imports(graph, layers)` lists the edges that go up the layer order (or leave it);
`cycles(graph)` lists the strongly connected components of more than one module (Tarjan).
`tests/test_layers.py` runs both on graftlib and on trees with an injected fault.
"""

import ast
from pathlib import Path

FACE = "face"  # the package's own `__init__`, `__main__` and `cli` (the `graft` command): above every layer


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, name: str) -> set[str]:
    """Dotted names an `ast` walk of the file finds in its import statements (everywhere)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the package modules it imports} over every `.py` file under the package dir `root`."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        targets = set()
        for dotted in _imported(path, name):
            while dotted and dotted not in files:  # `from x import y` with y not a module: x
                dotted = dotted.rpartition(".")[0]
            if dotted and dotted != name:
                targets.add(dotted)
        graph[name] = targets
    return graph


def layer_of(module: str, layers: tuple[str, ...]) -> str | None:
    """The layer a module belongs to: its first subpackage under the root, FACE for the root's own
    modules (`__init__`, `__main__`, `cli`), None for a module outside every layer."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] in ("__main__", "cli")):
        return FACE
    return parts[1] if parts[1] in layers else None


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...]) -> list[str]:
    """One line per import from a higher layer, and per module that sits in no layer."""
    rank = {name: i for i, name in enumerate((*layers, FACE))}
    out = []
    for module, targets in sorted(graph.items()):
        here = layer_of(module, layers)
        if here is None:
            out.append(f"{module} is in no layer (layers: {', '.join(layers)})")
            continue
        for t in sorted(targets):
            there = layer_of(t, layers)
            if there is not None and rank[there] > rank[here]:
                out.append(f"{module} ({here}) imports {t} ({there}): an upward import")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    scc.append(m)
                    if m == node:
                        break
                if len(scc) > 1:
                    out.append(sorted(scc))
    return out
