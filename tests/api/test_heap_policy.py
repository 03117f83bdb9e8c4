"""The periodic collection scans only what is new since the last one (heap.py):
a full scan of the heap holds the event loop for tens of milliseconds (issue 10:
/healthz within a few ms). Nothing here measures time: what is scanned is read
from the collector's generations."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from sift_server.server import collect_request_garbage


class Node:
    other: Node | None = None


def tracked(obj: object) -> bool:
    """In a generation the collector scans (frozen objects are in none)."""
    return any(o is obj for o in gc.get_objects())


def cycle() -> tuple[Node, weakref.ref[Node]]:
    node = Node()
    node.other = node
    return node, weakref.ref(node)


@pytest.fixture(autouse=True)
def thawed_after() -> Iterator[None]:
    gc.collect()
    yield
    gc.unfreeze()
    gc.collect()


def test_what_survives_the_periodic_collection_is_frozen() -> None:
    survivor = Node()
    assert tracked(survivor)
    collect_request_garbage()
    # The next periodic collection does not scan it again (nor anything else alive now).
    assert not tracked(survivor)
    assert not tracked(gc.get_objects)  # nothing of the test module's state either


def test_new_cyclic_garbage_is_still_collected() -> None:
    collect_request_garbage()
    node, ref = cycle()
    del node
    collect_request_garbage()
    assert ref() is None


def test_garbage_in_the_frozen_heap_waits_for_a_thaw_or_its_growth_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from sift_server import heap

    heap.freeze_loaded()  # as after a model load
    node, ref = cycle()
    collect_request_garbage()  # alive now: frozen
    del node
    collect_request_garbage()
    assert ref() is not None  # the frozen heap was not scanned
    monkeypatch.setattr(heap, "THAW_MIN_OBJECTS", 0)
    monkeypatch.setattr(heap, "THAW_GROWTH", 0.0)
    monkeypatch.setattr(heap, "_baseline", gc.get_freeze_count() - 1)  # it grew since
    assert heap.thaw_due()
    collect_request_garbage()
    assert ref() is None
    assert not heap.thaw_due()  # the bound counts from the thaw


def test_an_eviction_thaw_reclaims_frozen_cycles() -> None:
    from sift_server import heap

    node, ref = cycle()
    heap.freeze_loaded()
    del node
    assert ref() is not None
    heap.thaw_and_collect()
    assert ref() is None
