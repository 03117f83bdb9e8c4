"""A load's passing peak of memory, told to whoever keeps the memory budget.

An adapter's ``load`` runs in a worker thread and knows, midway, that it is about to
hold much more than the model will once loaded (the CTranslate2 conversion: the
transformers model and its converted copy, in a child process). It calls
:func:`report_load_peak`; the registry, which started the load inside
:func:`listening`, counts that many bytes for the model until the load ends, and the call
returns once the idle models that the peak pushes out of the budget are released, so the
peak arrives after them (tests/registry/test_registry.py). Outside
a registry's load (tests, ``sift models prepare``) nobody listens and the call does
nothing. A context variable carries the listener: ``asyncio.to_thread`` runs the load
in a copy of the caller's context."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_LISTENER: ContextVar[Callable[[int], None] | None] = ContextVar("sift_load_peak", default=None)


def report_load_peak(size: int) -> None:
    """The load in progress will hold about ``size`` bytes for a while."""
    listener = _LISTENER.get()
    if listener is not None:
        listener(size)


@contextmanager
def listening(listener: Callable[[int], None]) -> Iterator[None]:
    """Loads started inside (their threads copy this context) report their peaks to ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)
