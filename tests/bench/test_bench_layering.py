"""The bench's folders are layers: the commands on top, then a run, then what a run
is made of, then the report. Imports point down, never up or sideways into a command,
so each layer can be read and tested without those above it (function-level imports
included)."""

from __future__ import annotations

from tests.packaging.test_import_circles import PACKAGES, import_graph

# Top to bottom; a module may import its own folder's modules and any folder below its own.
LAYERS = (
    ("cli",),
    ("tools", "cluster", "simulate"),
    ("run",),
    ("arms",),
    ("client",),
    ("workload",),
    ("report",),
)


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _depth(folder: str) -> int:
    return next(depth for depth, folders in enumerate(LAYERS) if folder in folders)


def test_every_bench_module_is_in_a_layer() -> None:
    folders = {_folder(m) for m in import_graph(PACKAGES) if m.startswith("sift_bench.")}
    assert folders == {folder for layer in LAYERS for folder in layer}


def test_bench_imports_point_down() -> None:
    graph = import_graph(PACKAGES)
    upward = [
        (module, dep)
        for module, deps in graph.items()
        if module.startswith("sift_bench.")
        for dep in deps
        if dep.startswith("sift_bench.")
        and _folder(dep) != _folder(module)
        and _depth(_folder(dep)) <= _depth(_folder(module))
    ]
    assert upward == []
