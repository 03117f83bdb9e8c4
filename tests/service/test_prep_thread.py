"""The prep thread (service/prep.py): small preparations on the loop, large ones
and those with a completion in the one thread, small ones queued behind a large
one while it holds the thread, and nothing accepted after close."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from sift_server.adapters.base import Adapter, EncodeTask, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import ShuttingDown
from sift_server.service.prep import OFFLOAD_CHARS, PrepThread


class Recorder(Adapter):
    """Records the thread each preparation ran in; a gate can hold one in progress."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    @classmethod
    def load(cls, ctx: LoadContext) -> Recorder:
        raise NotImplementedError

    def prepare(self, task: TaskInput) -> Prepared:
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        return Prepared(list(task.texts), None, None)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        raise NotImplementedError


SMALL = EncodeTask(["x"])
LARGE = EncodeTask(["x" * OFFLOAD_CHARS])


@pytest.fixture
def prep() -> Any:
    thread = PrepThread()
    yield thread
    thread.close()


async def test_small_on_the_loop_large_in_the_prep_thread(prep: PrepThread) -> None:
    adapter = Recorder()
    await prep.prepare(adapter, SMALL)
    await prep.prepare(adapter, LARGE)
    await prep.prepare(adapter, SMALL, complete=lambda task: task)
    loop_thread = threading.current_thread().name
    assert adapter.threads[0] == loop_thread
    assert adapter.threads[1].startswith("sift-prep") and adapter.threads[2].startswith("sift-prep")


async def test_a_small_request_queues_behind_a_large_one(prep: PrepThread) -> None:
    adapter = Recorder()
    adapter.gate = threading.Event()
    large = asyncio.ensure_future(prep.prepare(adapter, LARGE))
    assert await asyncio.to_thread(adapter.entered.wait, 10)
    small = asyncio.ensure_future(prep.prepare(adapter, SMALL))
    await asyncio.sleep(0)
    assert not small.done()  # not run beside the large one on the loop
    adapter.gate.set()
    await asyncio.gather(large, small)
    assert all(name.startswith("sift-prep") for name in adapter.threads)


async def test_after_close_offloaded_work_is_refused(prep: PrepThread) -> None:
    adapter = Recorder()
    prep.close()
    prep.close()  # idempotent
    with pytest.raises(ShuttingDown):
        await prep.prepare(adapter, LARGE)
    await prep.prepare(adapter, SMALL)  # on the loop, as before
    assert adapter.threads == [threading.current_thread().name]
