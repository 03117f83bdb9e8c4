"""Prepare a request through its adapter and run it on the model's worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sift_server.adapters.base import Prepared, TaskInput
from sift_server.engine.ingress import IngressTicket
from sift_server.engine.worker import ModelWorker
from sift_server.errors import RequestCancelled
from sift_server.registry.registry import ModelRecord
from sift_server.service.timing import Timing


@dataclass(slots=True)
class RequestContext:
    """Per-request facts from the HTTP layer that the engine needs."""

    request_id: str
    started: float
    ingress: IngressTicket | None = None
    # Makes an awaitable that resolves when the client disconnects (None: not watched).
    disconnected: Callable[[], Awaitable[Any]] | None = None


@dataclass(slots=True)
class Outcome:
    """A primitive's response body and its timing."""

    payload: dict[str, Any]
    timing: Timing


async def run_task(
    record: ModelRecord, worker: ModelWorker, task: TaskInput, ctx: RequestContext, timing: Timing, lane: str | None
) -> tuple[list[Any], Prepared]:
    assert record.adapter is not None
    tokenize_start = time.perf_counter()
    prepared = record.adapter.prepare(task)
    prepared.lane = lane
    timing.tokenization_s = time.perf_counter() - tokenize_start
    ticket = worker.submit(prepared, request_id=ctx.request_id, lane=lane, ingress=ctx.ingress)
    if ctx.disconnected is None:
        outputs = await ticket.future
    else:
        gone = asyncio.ensure_future(ctx.disconnected())
        try:
            done, _ = await asyncio.wait({ticket.future, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if ticket.future not in done:
            # Leaves the queue if not started; a running forward drops its result.
            ticket.future.cancel()
            raise RequestCancelled("The client disconnected before the result was ready.")
        outputs = ticket.future.result()
    timing.queue_s = ticket.timing.queue_s
    timing.inference_s = ticket.timing.inference_s
    return outputs, prepared
