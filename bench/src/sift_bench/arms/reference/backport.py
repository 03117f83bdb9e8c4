"""Rewrite the Python 3.12-only syntax of the reference server for Python 3.11.

The only CPU build of PyTorch on this project's machines is for CPython 3.11,
and PyPI's 3.12 builds are CUDA builds of gigabytes, so the reference runs on
3.11. Its release uses two 3.12 features, both without runtime meaning once
annotations are lazy (every such module has ``from __future__ import
annotations``): type parameter lists (``class A[T: B]``, ``def f[T](...)``),
rewritten to ``TypeVar``s and ``Generic``; and one multi-line f-string,
rewritten to a concatenation. Nothing else is touched, and a file that still
does not parse is an error, never a silent skip.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

_HEAD = re.compile(r"^(?P<kw>(?:async )?def|class) (?P<name>\w+)\[", re.M)
_FSTRING = re.compile(r'f"data: \{\n(?P<expr>.*?)\n\s*\}\\n\\n"', re.S)
_IMPORT = "from typing import Generic as _Generic, TypeVar as _TypeVar\n"
_FUTURE = "from __future__ import annotations\n"


class BackportError(RuntimeError):
    """A file of the reference server cannot be made to parse on this Python."""


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _closing(text: str, start: int) -> int:
    """Index of the ``]`` that closes the ``[`` just before ``start``."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] in "([":
            depth += 1
        elif text[i] in ")]":
            depth -= 1
            if depth == 0:
                return i
    raise BackportError("unbalanced type parameter list")


def _typevar(param: str) -> tuple[str, str]:
    """``T: (A, B)`` / ``T: A`` / ``T`` → (name, the TypeVar assignment)."""
    name, _, bound = (s.strip() for s in param.partition(":"))
    if not bound:
        return name, f'{name} = _TypeVar("{name}")'
    if bound.startswith("(") and bound.endswith(")"):
        constraints = ", ".join(f'"{c}"' for c in _split_top(bound[1:-1]))
        return name, f'{name} = _TypeVar("{name}", {constraints})'
    return name, f'{name} = _TypeVar("{name}", bound="{bound}")'


def backport_source(source: str) -> str:
    """The same module without type parameter lists and nested-quote f-strings."""
    out = _FSTRING.sub(lambda m: '"data: " + (' + m.group("expr").strip() + ') + "\\n\\n"', source)
    changed = out != source
    while (match := _HEAD.search(out)) is not None:
        changed = True
        end = _closing(out, match.end())
        names, lines = zip(*(_typevar(p) for p in _split_top(out[match.end() : end])), strict=True)
        rest = out[end + 1 :]
        if match["kw"] == "class":
            generic = f"_Generic[{', '.join(names)}]"
            if rest.startswith("()"):
                rest = f"({generic})" + rest[2:]
            elif rest.startswith("("):
                rest = rest.replace(")", f", {generic})", 1)
            else:
                rest = f"({generic})" + rest
        line_start = out.rfind("\n", 0, match.start()) + 1
        indent = out[line_start : match.start()]
        decl = "".join(f"{indent}{line}\n" for line in lines)
        # The TypeVars go above the decorators, if any.
        insert = line_start
        while insert > 0:
            previous = out.rfind("\n", 0, insert - 1) + 1
            if not out[previous:insert].startswith(f"{indent}@"):
                break
            insert = previous
        head = out[insert : match.start()] + f"{match['kw']} {match['name']}"
        out = out[:insert] + decl + head + rest
    if changed and _IMPORT not in out:
        if _FUTURE not in out:
            raise BackportError("a rewritten module must defer its annotations (from __future__ import annotations)")
        out = out.replace(_FUTURE, _FUTURE + _IMPORT, 1)
    return out


def backport_tree(package: Path) -> list[Path]:
    """Rewrite every module under ``package`` that does not parse here; returns them."""
    rewritten = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        try:
            ast.parse(source, str(path))
            continue
        except SyntaxError:
            pass
        fixed = backport_source(source)
        try:
            ast.parse(fixed, str(path))
        except SyntaxError as exc:
            raise BackportError(f"{path} still does not parse after the backport: {exc}") from exc
        path.write_text(fixed, encoding="utf-8")
        rewritten.append(path)
    return rewritten
