"""The server package's import graph: no circle, and no arrow from the layers
below the transports (core, services, engine, registry, wire, adapters) back up
to them (api, cluster, the commands, the process shell). Read from the source,
function-level imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import sift_server

ROOT = Path(sift_server.__file__).parents[1]
BELOW = ("core", "composition", "service", "engine", "registry", "wire", "adapters", "errors", "config", "metrics")
TRANSPORTS = ("api", "cluster", "cli", "server", "processes")


def _modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "sift_server").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sift_server"):
                deps.update(resolve(f"{node.module}.{alias.name}") for alias in node.names)
            elif isinstance(node, ast.Import):
                deps.update(resolve(a.name) for a in node.names if a.name.startswith("sift_server"))
        graph[name] = deps - {name, "", "sift_server"}
    return graph


def _cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path from ``start`` back to itself, if any (depth first)."""
    stack: list[tuple[str, list[str]]] = [(dep, [start, dep]) for dep in graph[start]]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        if node == start:
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend((dep, [*path, dep]) for dep in graph.get(node, ()))
    return None


def _layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else ""


def test_no_import_circle() -> None:
    graph = _graph()
    circles = [path for name in graph if (path := _cycle_from(graph, name))]
    assert circles == []


def test_nothing_below_the_transports_imports_them() -> None:
    graph = _graph()
    arrows = [
        (name, dep)
        for name, deps in graph.items()
        if _layer(name) in BELOW
        for dep in deps
        if _layer(dep) in TRANSPORTS
    ]
    assert arrows == []
    assert len(graph) > 50  # the walk found the package
