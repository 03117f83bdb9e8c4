"""Prepare a request through its adapter and run it on the model's worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sift_server.adapters.base import Adapter, ExtractTask, Prepared, ScoreTask, TaskInput
from sift_server.engine.ingress import IngressTicket
from sift_server.engine.worker import ModelWorker
from sift_server.errors import RequestCancelled
from sift_server.registry.registry import ModelRecord
from sift_server.service.timing import Timing

# Requests with at least this many characters to tokenize are prepared in the
# prep thread, so that at most a few milliseconds of tokenizing stay on the loop
# (docs/architecture.md, "Keeping the event loop free", has the figures).
OFFLOAD_CHARS = 4_096

# One prep thread: preparations stay serial, as on the loop, because a fast
# tokenizer must not be used by two threads at once. While it holds any work,
# small requests queue behind it too (never run beside it on the loop).
_prep_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sift-prep")
_offloaded = 0


def task_chars(task: TaskInput) -> int:
    """Characters a preparation tokenizes (the instruction and query go with every item)."""
    shared = len(task.instruction or "")
    if isinstance(task, ScoreTask):
        shared += len(task.query)
    if isinstance(task, ExtractTask):
        shared += sum(len(label) for label in task.labels)
    return sum(len(text) for text in task.texts) + shared * len(task.texts)


# Turns a task into the one ``prepare`` reads, in the prep thread (images are decoded there).
Completion = Callable[[TaskInput], TaskInput]


def _complete_and_prepare(adapter: Adapter, task: TaskInput, complete: Completion | None) -> Prepared:
    return adapter.prepare(complete(task) if complete is not None else task)


async def prepare(adapter: Adapter, task: TaskInput, complete: Completion | None = None) -> Prepared:
    """``adapter.prepare`` on the loop when small, else in the prep thread;
    always in the prep thread when the task is to be completed first
    (decoding images never runs on the loop)."""
    global _offloaded
    if complete is None and _offloaded == 0 and task_chars(task) < OFFLOAD_CHARS:
        return adapter.prepare(task)
    _offloaded += 1
    try:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_prep_executor, _complete_and_prepare, adapter, task, complete)
    finally:
        _offloaded -= 1


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
    record: ModelRecord,
    worker: ModelWorker,
    task: TaskInput,
    ctx: RequestContext,
    timing: Timing,
    lane: str | None,
    complete: Completion | None = None,
) -> tuple[list[Any], Prepared]:
    assert record.adapter is not None
    tokenize_start = time.perf_counter()
    prepared = await prepare(record.adapter, task, complete)
    prepared.lane = lane
    timing.tokenization_s = time.perf_counter() - tokenize_start
    ticket = worker.submit(prepared, request_id=ctx.request_id, lane=lane, ingress=ctx.ingress)
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
