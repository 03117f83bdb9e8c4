"""The README's command table and the CLI's docstring name every ``sift`` subcommand, and no other."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import sift_server.cli
from sift_server.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def subcommands() -> set[str]:
    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    return set(actions[0].choices)


def test_the_readme_command_table_lists_every_subcommand() -> None:
    table = README.read_text(encoding="utf-8").split("## The `sift` command", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `sift ([a-z-]+)` \|", table, flags=re.MULTILINE))
    assert documented == subcommands()


def test_the_cli_docstring_lists_every_subcommand() -> None:
    doc = sift_server.cli.__doc__ or ""
    documented = set(re.findall(r"^  ([a-z-]+)  ", doc, flags=re.MULTILINE))
    assert documented == subcommands()
