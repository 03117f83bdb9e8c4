"""Settings that keep the server's own timers from racing its clients (issue 10)."""

from __future__ import annotations

import pydantic
import pytest

from sift_server.config import Settings
from sift_server.errors import MAX_RETRY_AFTER_S, ModelLoading, QueueFull, ShuttingDown


def test_idle_keep_alive_outlasts_every_retry_after() -> None:
    # A client that waits exactly Retry-After must find its pooled connection open.
    assert (
        max(ModelLoading.retry_after or 0, QueueFull.retry_after or 0, ShuttingDown.retry_after or 0)
        <= MAX_RETRY_AFTER_S
    )
    assert Settings().keep_alive_s > MAX_RETRY_AFTER_S


def test_a_keep_alive_not_above_retry_after_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="keep_alive_s"):
        Settings(keep_alive_s=MAX_RETRY_AFTER_S)
    assert Settings(keep_alive_s=MAX_RETRY_AFTER_S + 1).keep_alive_s == MAX_RETRY_AFTER_S + 1


def test_body_timeout_must_be_positive() -> None:
    with pytest.raises(pydantic.ValidationError):
        Settings(body_timeout_s=0)


def test_malloc_arenas_can_be_capped_on_glibc() -> None:
    import platform

    from sift_server.server import limit_malloc_arenas

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    assert limit_malloc_arenas(0) is False  # 0 leaves glibc's default
    assert limit_malloc_arenas(8) is True  # glibc's own default on 64-bit: harmless to set in a test


def test_periodic_collection_frees_cyclic_request_garbage() -> None:
    import gc
    import weakref

    from sift_server.server import collect_request_garbage

    class Node:
        pass

    gc.collect()
    gc.freeze()  # as after a model load: everything alive so far is out of sight
    try:
        node = Node()
        node.self = node  # type: ignore[attr-defined]
        ref = weakref.ref(node)
        del node
        collect_request_garbage()
        assert ref() is None
    finally:
        gc.unfreeze()
