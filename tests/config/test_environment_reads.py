"""No module of the server reads a ``SIFT_*`` variable or touches the environment
outside the settings (``sift_server.config``): every setting is read there, once,
and passed down as a value. Read from the source, so a new read anywhere fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import sift_server

PACKAGE = Path(sift_server.__file__).parent
SETTINGS = PACKAGE / "config"
VARIABLE = re.compile(r"^SIFT_[A-Z0-9_]+$")

# Module -> why it may use the environment (or spell a SIFT_ name) anyway.
ALLOWED = {
    "processes.py": "copies the whole environment into the children it starts (they read their settings)",
    "telemetry/tracing.py": "OTEL_EXPORTER_OTLP_ENDPOINT is OpenTelemetry's own variable, honoured as OTel's tools do",
    "adapters/backends/artifacts.py": "XDG_CACHE_HOME, the XDG standard's, for the default artifact folder",
    "cluster/subjects.py": "SIFT_WORK is the JetStream stream's name, not a variable",
    "adapters/docling_child.py": "HF_HUB_OFFLINE in docling's own child, so its model loaders never reach a hub",
    "adapters/gliner2_v2_child.py": "HF_HUB_OFFLINE in the gliner2 2.x child, so the library never reaches a hub",
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def environment_uses(source: str) -> list[str]:
    """``os.environ``, ``os.getenv``/``putenv``/``unsetenv`` and literal ``SIFT_*`` names (docstrings aside)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv", "environb"):
            uses.append(f"line {node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            uses += [f"line {node.lineno}: from os import {a.name}" for a in node.names if "env" in a.name]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:  # noqa: SIM102
            if VARIABLE.match(node.value):
                uses.append(f"line {node.lineno}: {node.value!r}")
    return uses


def test_the_finder_sees_each_kind_of_read() -> None:
    source = 'import os\nfrom os import getenv\nos.environ["SIFT_X"] = "1"\nos.getenv("HOME")\nNAME = "SIFT_Y"\n'
    assert len(environment_uses(source)) == 5
    assert environment_uses('"""Mentions SIFT_X."""\nTEXT = "set SIFT_X=1 to decide again"\n') == []


def test_only_the_settings_read_the_environment() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if path.is_relative_to(SETTINGS) or relative in ALLOWED:
            continue
        uses = environment_uses(path.read_text(encoding="utf-8"))
        if uses:
            offenders[relative] = uses
    assert offenders == {}


def test_every_allowed_module_still_needs_its_exception() -> None:
    stale = [name for name in ALLOWED if not environment_uses((PACKAGE / name).read_text(encoding="utf-8"))]
    assert stale == []
