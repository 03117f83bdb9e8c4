"""Prepare a request through its adapter and run it on the model's engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sift_server.adapters.base import Prepared, TaskInput
from sift_server.engine.ingress import IngressTicket
from sift_server.engine.model_engine import ModelEngine
from sift_server.errors import RequestCancelled
from sift_server.registry.registry import ModelRecord
from sift_server.service.prep import DeferredDecode, PrepThread
from sift_server.service.timing import Timing


@dataclass(slots=True)
class RequestContext:
    """Per-request facts from the HTTP layer that the engine needs."""

    request_id: str
    started: float
    ingress: IngressTicket | None = None
    # Makes an awaitable that resolves when the client disconnects (None: not watched).
    disconnected: Callable[[], Awaitable[Any]] | None = None
    # The server's prep thread (``ServerState.prep``).
    prep: PrepThread = field(kw_only=True)


@dataclass(slots=True)
class Outcome:
    """A primitive's response body and its timing."""

    payload: dict[str, Any]
    timing: Timing


async def run_task(
    record: ModelRecord,
    engine: ModelEngine,
    task: TaskInput,
    ctx: RequestContext,
    timing: Timing,
    lane: str | None,
    complete: DeferredDecode | None = None,
) -> tuple[list[Any], Prepared]:
    assert record.adapter is not None
    tokenize_start = time.perf_counter()
    prepared = await ctx.prep.prepare(record.adapter, task, complete)
    prepared.lane = lane
    timing.tokenization_s = time.perf_counter() - tokenize_start
    ticket = engine.submit(prepared, request_id=ctx.request_id, lane=lane, ingress=ctx.ingress)
    if ctx.disconnected is None:
        outputs = await ticket.future
    else:
        outputs = await _unless_disconnected(ticket.future, ctx.disconnected)
    timing.queue_s = ticket.timing.queue_s
    timing.inference_s = ticket.timing.inference_s
    return outputs, prepared


# A request answered within this long never starts its disconnect watch (a task and
# a pending receive per request are a visible share of a short request's cost); one
# still waiting then is watched, so an abandoned request leaves the queue at most
# this much later than it would with a watch from the start.
WATCH_AFTER_S = 0.05


async def _unless_disconnected(
    future: asyncio.Future[list[Any]], disconnected: Callable[[], Awaitable[Any]]
) -> list[Any]:
    """The future's result, unless the client disconnects first: then the future is
    cancelled (it leaves the queue if not started; a running forward drops its
    result) and the request ends as cancelled. Callbacks rather than
    ``asyncio.wait``, and the watch task starts only after ``WATCH_AFTER_S``."""
    watch: list[asyncio.Future[Any]] = []

    def on_gone(task: asyncio.Future[Any]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved: a failed watch counts as a disconnect
            future.cancel()

    def start_watch() -> None:
        if not future.done():
            gone: asyncio.Future[Any] = asyncio.ensure_future(disconnected())
            gone.add_done_callback(on_gone)
            watch.append(gone)

    timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start_watch)
    try:
        return await future
    except asyncio.CancelledError:
        if watch and watch[0].done() and not watch[0].cancelled():
            raise RequestCancelled("The client disconnected before the result was ready.") from None
        raise
    finally:
        timer.cancel()
        for gone in watch:
            gone.remove_done_callback(on_gone)
            gone.cancel()
