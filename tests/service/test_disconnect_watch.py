"""The disconnect watch of a waiting request: started only once it has waited a while."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sift_server.errors import RequestCancelled
from sift_server.service import run


async def test_a_quick_answer_never_starts_the_watch() -> None:
    started = 0

    async def disconnected() -> None:
        nonlocal started
        started += 1
        await asyncio.Event().wait()

    future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
    # Answered a few loop turns later, well within WATCH_AFTER_S.
    asyncio.get_running_loop().call_later(run.WATCH_AFTER_S / 10, future.set_result, ["answer"])
    assert await run._unless_disconnected(future, disconnected) == ["answer"]
    await asyncio.sleep(run.WATCH_AFTER_S * 2)
    assert started == 0


async def test_a_client_gone_while_waiting_cancels_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "WATCH_AFTER_S", 0.001)
    gone = asyncio.Event()

    async def disconnected() -> None:
        await gone.wait()

    future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(run._unless_disconnected(future, disconnected))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    gone.set()
    with pytest.raises(RequestCancelled):
        await waiting
    assert future.cancelled()


async def test_the_watch_stops_with_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "WATCH_AFTER_S", 0.001)
    stopped = asyncio.Event()

    async def disconnected() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(run._unless_disconnected(future, disconnected))
    await asyncio.sleep(0.01)
    future.set_result(["late answer"])
    assert await waiting == ["late answer"]
    await asyncio.wait_for(stopped.wait(), 1)
