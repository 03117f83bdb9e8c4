"""Write ``sift_sdk/client.py`` from ``sift_sdk/async_client.py``.

The two clients have the same methods, signatures and docstrings; only the IO differs
(``await``, ``asyncio.sleep``, ``httpx.AsyncClient``, ``aclose``). The async client is the one
to edit; this script derives the blocking one by plain text substitutions, as httpcore's
``unasync.py`` does, and ``tests/sdk/test_sdk_clients_in_step.py`` fails when the committed
``client.py`` is not what it writes.

    python sdk/scripts/unasync.py           # rewrite client.py
    python sdk/scripts/unasync.py --check   # exit 1 if client.py is stale
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sift_sdk"
SOURCE = PACKAGE / "async_client.py"
TARGET = PACKAGE / "client.py"

HEADER = (
    "# Generated from async_client.py by sdk/scripts/unasync.py: edit that file, then run\n"
    "# `python sdk/scripts/unasync.py`. tests/sdk/test_sdk_clients_in_step.py checks it.\n"
)

#: (pattern, replacement), applied in order to the whole source.
SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    (r"\bAsynchronous client \(asyncio, httpx\.AsyncClient\)", "Synchronous client (httpx.Client)"),
    (r"\bAsyncio client\b", "Blocking client"),
    (r"\bAsyncSiftClient\b", "SiftClient"),
    (r"\bhttpx\.AsyncClient\b", "httpx.Client"),
    (r"^import asyncio$", "import time"),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"\bAwaitable\[None\]", "None"),
    (r"\bAwaitable, ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\basync def ", "def "),
    (r"\bawait ", ""),
)


def unasync(source: str) -> str:
    """The blocking client's source for the async client's ``source``."""
    for pattern, replacement in SUBSTITUTIONS:
        source = re.sub(pattern, replacement, source, flags=re.MULTILINE)
    return HEADER + source


def main(argv: Sequence[str] = ()) -> int:
    expected = unasync(SOURCE.read_text(encoding="utf-8"))
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != expected:
            print(f"{TARGET} is stale: run python sdk/scripts/unasync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(expected, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
