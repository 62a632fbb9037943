"""No import cycles among the project's own modules.

Two modules that import each other (at the top or inside a function) are one piece split in two: neither
can be read, tested or moved without the other, and a function-level import that only hides the circle
from Python keeps the tangle. Every .py of the checkout is parsed (not imported: nothing runs), each
`import`/`from ... import` anywhere in it becomes an edge to the project module it names, and the
strongly connected components of that graph must all be single modules.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKIP_DIRS = {"__pycache__", "build", "dist", "node_modules"}

# Cycles we know of and have not untied yet, each as the sorted list of its modules: none.
KNOWN_CYCLES: list[list[str]] = []


def project_modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package's __init__) for every .py under root (dot dirs, such as the
    venv, and build output left out)."""
    modules = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                         and not d.endswith(".egg-info"))
        for name in files:
            if not name.endswith(".py"):
                continue
            path = Path(folder) / name
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            if parts:
                modules[".".join(parts)] = (path, is_package)
    return modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports, wherever in the file the import is."""
    modules = project_modules(root)

    def known(name: str) -> str | None:
        """The project module `name` is, or is in (`cdi.spec.Spec` -> `cdi.spec`); None: not ours."""
        while name:
            if name in modules:
                return name
            name = name.rpartition(".")[0]
        return None

    graph = {}
    for module, (path, is_package) in modules.items():
        package = module if is_package else module.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - node.level + 1]
                    base = ".".join(p for p in [*parts, base] if p)
                # `from cdi import spec` imports the module cdi.spec; `from cdi.spec import Spec`, cdi.spec
                edges.update(known(f"{base}.{alias.name}") if base else known(alias.name) for alias in node.names)
        edges.discard(None)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
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
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in component]
    return "; ".join(edges)


def test_no_import_cycles_among_the_projects_modules():
    graph = import_graph(REPO)
    assert "cdi.spec" in graph and "runtime_shim.main" in graph   # the walk found the project
    new = [c for c in cycles(graph) if c not in KNOWN_CYCLES]
    assert not new, "import cycles (untie them: move the shared piece to a module both can import):\n" + \
        "\n".join(describe(c, graph) for c in new)


def test_a_cycle_through_a_function_level_or_relative_import_is_found(tmp_path):
    """The check itself: an import inside a function, and a relative one, count as edges."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import thing\n")
    (package / "b.py").write_text("def thing():\n    from . import c\n")
    (package / "c.py").write_text("import pkg.a\n")
    (package / "d.py").write_text("from pkg import a\n")   # into the cycle, not part of it
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert "pkg.a -> pkg.b" in describe(["pkg.a", "pkg.b", "pkg.c"], graph)
