"""A client that goes away cancels its generation: ``until_gone`` stops reading the
answer and closes it, which is what makes the engine drop the request
(engine_process.py sends the engine's child a cancellation when its iterator closes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sift_server.generation.service import Piece, until_gone


async def test_a_disconnect_closes_the_answer() -> None:
    closed = asyncio.Event()
    produced: list[int] = []

    async def endless() -> AsyncIterator[Piece]:
        try:
            n = 0
            while True:
                n += 1
                produced.append(n)
                yield Piece("x", None, n)
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    gone = asyncio.Event()
    seen = []
    async for piece in until_gone(endless(), gone.wait):
        seen.append(piece)
        if len(seen) == 3:
            gone.set()
        if len(seen) > 10:  # not stopped by the disconnect: fail below instead of running forever
            break
    await asyncio.wait_for(closed.wait(), 5)
    assert len(seen) == 3
    assert len(produced) <= 4


async def test_without_a_disconnect_the_answer_is_read_to_its_end() -> None:
    async def three() -> AsyncIterator[Piece]:
        for n in range(3):
            yield Piece("x", "stop" if n == 2 else None, n + 1)

    never = asyncio.Event()
    assert [p.completion_tokens async for p in until_gone(three(), never.wait)] == [1, 2, 3]
