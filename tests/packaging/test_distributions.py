"""A server install pulls only what serving needs: the benchmark harness is its
own distribution, and the server's code never imports it."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from sift_server import cli

ROOT = Path(__file__).resolve().parents[2]
BENCH_ONLY = ("matplotlib", "tqdm", "httpx", "sift-sdk", "sift-bench")
# Server modules that import httpx where they use it, behind the optional extra 'remote'
# (a remote generation model's upstream client), never at the server's import.
OPTIONAL_HTTPX = {"server/src/sift_server/generation/remote.py"}


def _requirement_names(pyproject: Path) -> set[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    names = set()
    for requirement in project["dependencies"]:
        name = requirement.split(";")[0]
        for stop in "<>=!~[ ":
            name = name.split(stop)[0]
        names.add(name.strip().lower())
    return names


def test_the_server_distribution_declares_no_benchmark_dependency() -> None:
    names = _requirement_names(ROOT / "server" / "pyproject.toml")
    assert not names & set(BENCH_ONLY)
    assert {"fastapi", "uvicorn", "msgspec"} <= names


def test_the_bench_distribution_carries_the_benchmark_dependencies() -> None:
    names = _requirement_names(ROOT / "bench" / "pyproject.toml")
    assert {"sift-server", "sift-sdk", "matplotlib", "tqdm", "httpx"} <= names


def test_no_server_module_imports_the_bench_the_sdk_or_a_plotting_library() -> None:
    offenders = []
    for path in sorted((ROOT / "server" / "src" / "sift_server").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            for module in modules:
                if module == "httpx" and path.relative_to(ROOT).as_posix() in OPTIONAL_HTTPX:
                    continue
                if module.split(".")[0] in {"sift_bench", "sift_sdk", "matplotlib", "tqdm", "httpx"}:
                    offenders.append(f"{path.relative_to(ROOT)}: {module}")
    assert offenders == []


def test_bench_commands_without_the_bench_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [])
    for command in cli.BENCH_COMMANDS:
        assert cli.main([command, "--trials", "3"]) == 2
        assert "pip install ./bench" in capsys.readouterr().err


def test_the_installed_bench_registers_its_commands() -> None:
    parser = cli.build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command")
    bench = subcommands.choices["bench"]  # type: ignore[attr-defined]
    assert "--workload" in bench.format_help()


def test_building_the_cli_does_not_import_the_plotting_library() -> None:
    # Every `sift` command (serve included) builds the parser with the bench's commands.
    import subprocess
    import sys

    code = "import sys; from sift_server.cli import build_parser; build_parser(); print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
