"""No import circle in the server, the SDK or the bench, together or apart.

Read from the source, so that a circle hidden by a deferred import (one inside
a function, or under ``if TYPE_CHECKING:``) counts as much as one at the top of a
module: it still means neither module can be understood, tested or moved without
the other."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "sift_server": ROOT / "server" / "src",
    "sift_sdk": ROOT / "sdk" / "src",
    "sift_bench": ROOT / "bench" / "src",
}


def modules(packages: Mapping[str, Path]) -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name)."""
    found = {}
    for package, src in packages.items():
        for path in (src / package).rglob("*.py"):
            name = ".".join(path.relative_to(src).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def import_graph(packages: Mapping[str, Path]) -> dict[str, set[str]]:
    """Each module to the modules of the packages it imports, wherever the import stands."""
    known = modules(packages)

    def resolve(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's own package upwards
                    parts = name.split(".")[: len(name.split(".")) - node.level + is_package]
                    base = ".".join([*parts, base] if base else parts)
                deps.update(resolve(f"{base}.{alias.name}") for alias in node.names)
            elif isinstance(node, ast.Import):
                deps.update(resolve(alias.name) for alias in node.names)
        graph[name] = deps - {name, ""}
    return graph


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_in_server_sdk_or_bench() -> None:
    assert circles(import_graph(PACKAGES)) == []


def test_the_graph_covers_the_three_packages() -> None:
    graph = import_graph(PACKAGES)
    assert {name.split(".")[0] for name in graph} == set(PACKAGES)
    # An arrow the bench is known to draw: its runner starts servers through its arms.
    assert "sift_bench.arms.server" in graph["sift_bench.run.runner"]


def _write(root: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_circle_through_a_deferred_import_is_found(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import g\n",
            "pkg/b.py": "def g():\n    from pkg import a\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.d import D\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/d.py": "from ..c import X\n",
            "pkg/e.py": "import pkg.a\n",
        },
    )
    assert circles(import_graph({"pkg": tmp_path})) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d"]]


def test_no_circle_when_the_arrows_go_one_way(tmp_path: Path) -> None:
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg import b\n", "pkg/b.py": "import os\n"})
    assert circles(import_graph({"pkg": tmp_path})) == []
