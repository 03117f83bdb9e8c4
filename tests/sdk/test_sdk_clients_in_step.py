"""The blocking and the asyncio client stay one API: same methods, same signatures, same docs.

``client.py`` is generated from ``async_client.py`` (``sdk/scripts/unasync.py``); these tests
fail when it was edited by hand or not regenerated, and, independently of the generator, when
the two public surfaces drift.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any, get_overloads

import pytest

from sift_sdk import AsyncSiftClient, SiftClient

SCRIPT = Path(__file__).resolve().parents[2] / "sdk" / "scripts" / "unasync.py"

#: Blocking name -> asyncio name, where they differ.
RENAMED = {"close": "aclose", "__enter__": "__aenter__", "__exit__": "__aexit__"}

#: Words that may differ between the two, in annotations and docstrings (async -> blocking).
IO_WORDS = {
    "httpx.AsyncClient": "httpx.Client",
    "Awaitable[None]": "None",
    "AsyncSiftClient": "SiftClient",
    "Asyncio client": "Blocking client",
    ":meth:`aclose`": ":meth:`close`",
}


def load_unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sift_sdk_unasync", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_blocking_client_is_what_the_generator_writes() -> None:
    unasync = load_unasync()
    assert unasync.TARGET.read_text(encoding="utf-8") == unasync.unasync(unasync.SOURCE.read_text(encoding="utf-8")), (
        "sdk/src/sift_sdk/client.py is stale or edited by hand: edit async_client.py, then run "
        "python sdk/scripts/unasync.py"
    )


def public_methods(cls: type) -> dict[str, Any]:
    names = [n for n in vars(cls) if not n.startswith("_") or n in ("__init__", *RENAMED, *RENAMED.values())]
    return {n: getattr(cls, n) for n in names if callable(getattr(cls, n))}


def blocking_text(text: str | None) -> str:
    text = text or ""
    for async_word, blocking_word in IO_WORDS.items():
        text = text.replace(async_word, blocking_word)
    return text


def shape(function: Any) -> list[tuple[str, Any, Any, str]]:
    """Each parameter's name, kind, default and annotation (as the blocking client would write it)."""
    signature = inspect.signature(function)
    return [(p.name, p.kind, p.default, blocking_text(str(p.annotation))) for p in signature.parameters.values()] + [
        ("return", None, None, blocking_text(str(signature.return_annotation)))
    ]


def test_both_clients_have_the_same_public_methods() -> None:
    blocking = set(public_methods(SiftClient))
    asyncio_names = {RENAMED.get(n, n) for n in blocking}
    assert asyncio_names == set(public_methods(AsyncSiftClient))
    assert "encode" in blocking and "extract" in blocking


@pytest.mark.parametrize("name", sorted(public_methods(SiftClient)))
def test_each_method_has_the_same_signature_overloads_and_docstring(name: str) -> None:
    blocking = getattr(SiftClient, name)
    asynchronous = getattr(AsyncSiftClient, RENAMED.get(name, name))
    if name != "__init__":
        assert not inspect.iscoroutinefunction(blocking)
        assert inspect.iscoroutinefunction(asynchronous)
    assert shape(blocking) == shape(asynchronous)
    assert [shape(f) for f in get_overloads(blocking)] == [shape(f) for f in get_overloads(asynchronous)]
    assert (blocking.__doc__ or "") == blocking_text(asynchronous.__doc__)


def test_extract_keeps_its_single_and_list_overloads_in_both() -> None:
    assert len(get_overloads(SiftClient.extract)) == len(get_overloads(AsyncSiftClient.extract)) == 2


def test_the_client_classes_document_the_same_thing() -> None:
    assert SiftClient.__doc__ == blocking_text(AsyncSiftClient.__doc__)
