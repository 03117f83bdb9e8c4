"""The cyclic garbage collector's policy: what it scans, and when.

The raised thresholds (server.py) make CPython's own full collections almost
never happen, so the server runs them itself: after a model load, after an
eviction, and every ``malloc_trim_s`` (server.py). A full collection holds the
GIL, so the event loop, for as long as it scans every object the collector
tracks; with a model's and the libraries' objects in sight that is tens of
milliseconds, which ``/healthz`` would see (issue 10).

So what survives a collection is frozen (``gc.freeze``): the next periodic
collection scans only the objects created or kept since, a few thousand
objects, not the whole heap. The cost: a frozen object that later becomes
cyclic garbage is not reclaimed until the frozen heap is thawed. That happens
on every eviction, and when the frozen heap has grown by more than
``THAW_GROWTH`` (at least ``THAW_MIN_OBJECTS`` objects) since it was last
thawed or a model was loaded: objects freed by reference counting leave the
frozen heap, so its growth bounds what can be waiting there, and the one long
collection is paid only when that much has built up.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)

THAW_GROWTH = 0.25
THAW_MIN_OBJECTS = 20_000

# The frozen heap's size after the last load, eviction or thaw.
_baseline = 0


def _frozen() -> None:
    global _baseline
    gc.freeze()
    _baseline = gc.get_freeze_count()


def freeze_loaded() -> None:
    """After a model load: collect the load's garbage, then move everything alive
    (the weights, the libraries) out of the collector's sight for good."""
    gc.collect()
    _frozen()


def thaw_and_collect() -> int:
    """Scan the whole heap (after an eviction: the evicted model's cycles were
    frozen with it), then freeze what is left. Tens of milliseconds."""
    gc.unfreeze()
    found = gc.collect()
    _frozen()
    return found


def thaw_due() -> bool:
    """Whether the frozen heap has grown enough since its last thaw that garbage
    waiting in it is worth one full scan."""
    grown = gc.get_freeze_count() - _baseline
    return grown > max(int(_baseline * THAW_GROWTH), THAW_MIN_OBJECTS)


def collect_request_garbage() -> int:
    """The periodic collection: the objects created since the last one (cyclic
    request garbage: exceptions with tracebacks, futures, closures), then freeze
    the survivors. The frozen heap is scanned only when :func:`thaw_due`."""
    started = time.perf_counter()
    if thaw_due():
        before = gc.get_freeze_count()
        found = thaw_and_collect()
        log.info(
            "periodic gc: frozen heap grew to %d objects; full scan found %d unreachable in %.1f ms",
            before,
            found,
            (time.perf_counter() - started) * 1000,
        )
        return found
    found = gc.collect()
    gc.freeze()
    if found >= 1000:
        log.info("periodic gc: %d unreachable objects in %.1f ms", found, (time.perf_counter() - started) * 1000)
    return found
