"""The asyncio shell of one model's scheduler: futures, the executor thread, timers.

All batching state and decisions live in the synchronous ``Scheduler``; this
module only turns its answers into asyncio waits and forwards. It wakes on
events (admission, ingress change, forward end, cancellation, a policy or
queue deadline) and never polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sift_server.engine.clock import Clock, monotonic
from sift_server.engine.ingress import IngressBoard, IngressTicket
from sift_server.engine.policy import Dispatch, Policy, WaitUntil
from sift_server.engine.scheduler import Batch, Scheduler, SchedulerConfig
from sift_server.engine.trace import ForwardRecord, NullTrace, TraceSink
from sift_server.errors import InferenceError, QueueFull, QueueTimeout, ShuttingDown, SiftError
from sift_server.forward_io import Part, Prepared

log = logging.getLogger(__name__)

ForwardFn = Callable[[Sequence[Part]], list[list[Any]]]


@dataclass(slots=True)
class RequestTiming:
    queue_s: float = 0.0
    inference_s: float = 0.0
    forwards: int = 0


@dataclass(slots=True)
class Ticket:
    """Shell-side state of one admitted request."""

    request_id: str
    prepared: Prepared
    future: asyncio.Future[list[Any]]
    arrival: float
    admitted: float
    outputs: list[Any] = field(default_factory=list)
    timing: RequestTiming = field(default_factory=RequestTiming)


# The nice the server's forward threads run at, so the loop that reads requests keeps up
# while a forward runs (EngineConfig's default of 0 leaves tests' threads alone).
SERVING_FORWARD_NICE = 10


@dataclass(frozen=True, slots=True)
class EngineConfig:
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    # Added to the forward thread's nice value (Linux: per thread); 0 leaves it alone.
    forward_nice: int = 0
    # Yield the CPU right after handing a forward to its thread (see _start_forward).
    yield_on_dispatch: bool = True


def _lower_thread_priority(nice: int) -> None:
    if nice > 0 and hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)


class ModelEngine:
    """Turns the scheduler's answers into asyncio waits and forwards.

    The scheduler (``engine/scheduler.py``) owns every piece of batching state;
    this shell owns only what asyncio needs: each request's future and timing,
    the executor thread, one timer, and the shutdown event.
    """

    def __init__(
        self,
        model: str,
        forward: ForwardFn,
        policy: Policy,
        config: EngineConfig = EngineConfig(),
        *,
        clock: Clock = monotonic,
        trace: TraceSink | None = None,
        observers: Sequence[Callable[[ForwardRecord], None]] = (),
    ) -> None:
        self.model = model
        self.config = config
        self.scheduler = Scheduler(policy, config.scheduler)
        self._forward = forward
        self._clock = clock
        self._trace = trace or NullTrace()
        self._observers = list(observers)
        self._tickets: dict[str, Ticket] = {}
        self._ids = itertools.count()
        self.ingress = IngressBoard(self.scheduler, on_change=self._wake)
        # One forward at a time per model: a single dedicated thread, at a lower
        # CPU priority than the event loop so that reading and admitting a burst
        # is not starved by a running forward on a shared core.
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix=f"forward-{model}",
            initializer=_lower_thread_priority,
            initargs=(config.forward_nice,),
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._decision_pending = False
        self._running: asyncio.Future[list[list[Any]] | None] | None = None
        self._emptied: asyncio.Event | None = None
        self._closing: asyncio.Task[None] | None = None
        # What a request that comes after close hears (None: shutting down).
        self._close_error: SiftError | None = None
        self._stopped = False

    @property
    def policy(self) -> Policy:
        return self.scheduler.policy

    @property
    def busy(self) -> bool:
        return self.scheduler.busy

    @property
    def forwards_run(self) -> int:
        return self.scheduler.forwards_run

    @property
    def has_work(self) -> bool:
        """A forward running, requests queued, or requests being read."""
        return not self.scheduler.idle or self.scheduler.ingress_pending > 0

    @property
    def queued_items(self) -> int:
        return self.scheduler.queued_items

    @property
    def queued_requests(self) -> int:
        return self.scheduler.queued_requests

    # ---- lifecycle -------------------------------------------------------

    def start(self) -> None:
        """Bind to the running event loop (decisions run as its callbacks)."""
        self._loop = asyncio.get_running_loop()

    async def close(self, grace_s: float, error: SiftError | None = None) -> None:
        """Stop admitting, finish queued and in-flight work within ``grace_s``,
        then fail whatever remains with ``error`` (default: shutting down).
        Safe to call more than once (signal, lifespan and eviction may all
        call it): later calls wait for the first one."""
        if self._closing is None:
            self.scheduler.close()  # admit nothing from here on
            self._close_error = error
            self._closing = asyncio.ensure_future(self._close(grace_s, error))
        await asyncio.shield(self._closing)

    async def _close(self, grace_s: float, error: SiftError | None) -> None:
        self._emptied = asyncio.Event()
        self._check_emptied()
        self._wake()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._emptied.wait(), grace_s)
        self._stopped = True
        self._cancel_timer()
        failure = error or ShuttingDown("The server is shutting down; the request was not run.")
        # Queued requests, and those of a forward still running past the grace period.
        for key in list(self._tickets):
            self.scheduler.abort(key)
            self._fail(self._tickets[key], failure)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def forward_finished(self) -> None:
        """Wait until no forward runs (its thread may still use the model)."""
        running = self._running
        if running is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(running)

    # ---- admission -------------------------------------------------------

    def submit(
        self,
        prepared: Prepared,
        *,
        request_id: str,
        lane: str | None = None,
        ingress: IngressTicket | None = None,
    ) -> Ticket:
        """Admit one request; the returned ticket's future resolves to one
        output per item. Raises ``QueueFull``/``ShuttingDown``."""
        now = self._clock()
        arrival = ingress.arrival if ingress is not None else now
        try:
            if self._closing is not None and self._close_error is not None:
                # Closed to give its memory to another model, not shutting down.
                raise _copy(self._close_error)
            if self._stopped:
                raise ShuttingDown("The server is shutting down and admits no new work.")
            key = str(next(self._ids))
            try:
                self.scheduler.admit(key, prepared.item_costs, now, lane=lane, compat_key=prepared.compat_key)
            except QueueFull as exc:
                raise QueueFull(f"Model '{self.model}': {exc.message}") from None
            loop = asyncio.get_running_loop()
            n_items = len(prepared.item_costs)
            ticket = Ticket(request_id, prepared, loop.create_future(), arrival, now, [None] * n_items)
            self._tickets[key] = ticket
            ticket.future.add_done_callback(lambda fut: self._on_ticket_done(key, fut))
        finally:
            # Admission (or its refusal) ends ingress; the queue already holds it.
            if ingress is not None:
                ingress.end()
            # Decide after one loop turn: requests whose tasks are already
            # runnable (the rest of a burst read in the same turn) join first.
            self._wake()
        return ticket

    def _on_ticket_done(self, key: str, fut: asyncio.Future[list[Any]]) -> None:
        self._tickets.pop(key, None)
        if not fut.cancelled() and fut.exception() is None:
            return  # answered: the scheduler hears of it when its forward completes
        # Failed or cancelled: none of its remaining items may run.
        if self.scheduler.abort(key):
            self._wake()

    # ---- scheduling ------------------------------------------------------

    def _wake(self) -> None:
        """Ask for a decision at the next turn of the loop (coalesced). The one
        turn lets requests whose tasks are already runnable be admitted first."""
        if self._decision_pending or self._stopped or self._loop is None:
            return
        self._decision_pending = True
        self._loop.call_soon(self._decide)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _decide(self) -> None:
        """Apply the policy: start a forward, or arm a timer for its deadline.
        Runs on every event; there is no scheduler task and no polling."""
        self._decision_pending = False
        self._cancel_timer()
        if self._stopped or self._loop is None:
            return
        now = self._clock()
        for key in self.scheduler.expire(now):
            ticket = self._tickets.get(key)
            if ticket is not None:
                timeout = self.scheduler.config.queue_timeout
                self._fail(
                    ticket,
                    QueueTimeout(
                        f"Model '{self.model}' could not start the request within {timeout:g} s; retry shortly."
                    ),
                )
        decision = self.scheduler.decide(now)
        deadline = self.scheduler.next_expiry()
        if isinstance(decision, Dispatch):
            self._start_forward(decision, now)
            deadline = None  # the forward's end decides again
        elif isinstance(decision, WaitUntil):
            deadline = decision.deadline if deadline is None else min(deadline, decision.deadline)
        else:
            self._check_emptied()
        if deadline is not None:
            self._timer = self._loop.call_later(max(0.0, deadline - now), self._wake)

    def _start_forward(self, decision: Dispatch, decided: float) -> None:
        assert self._loop is not None
        batch = self.scheduler.take(decision, decided)
        if batch is None:
            return
        tickets = [self._tickets[s.pending.request_id] for s in batch.slices]
        record = ForwardRecord(
            model=self.model,
            lane=batch.lane,
            forward_id=batch.forward_id,
            reason=batch.reason,
            request_ids=[t.request_id for t in tickets],
            arrivals=[t.arrival for t in tickets],
            admitted=[t.admitted for t in tickets],
            items=batch.items,
            cost=batch.cost,
            decided=decided,
            chunks=max(1, len(batch.chunks)),
        )
        running = self._loop.run_in_executor(self._executor, self._timed_forward, batch, tickets, record)
        self._running = running
        running.add_done_callback(lambda fut: self._forward_done(fut, batch, tickets, record))
        if self.config.yield_on_dispatch:
            # Give the forward thread the GIL and the core now: otherwise it waits
            # for this loop turn's bookkeeping, which is off the critical path.
            os.sched_yield()

    def _forward_done(
        self, fut: asyncio.Future[list[list[Any]] | None], batch: Batch, tickets: list[Ticket], record: ForwardRecord
    ) -> None:
        self._running = None
        exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        if exc is not None:
            log.error("forward %s of model %s failed: %r", record.forward_id, self.model, exc)
            record.error = f"{type(exc).__name__}: {exc}"
        if record.start == 0.0:  # cancelled before its thread ran it
            record.start = record.end = self._clock()
        completion = self.scheduler.complete(batch, record.start, record.end, ok=exc is None)
        if exc is not None:
            # Requests answered by an earlier sub-forward keep their answers.
            failure = InferenceError(f"Internal error while running model '{self.model}'.")
            for key in completion.failed:
                self._fail(self._tickets.get(key), failure)
        else:
            outputs = fut.result()
            if outputs is not None:  # None: delivered sub-forward by sub-forward
                self._fan_out(batch, tickets, outputs, record)
                for key in completion.finished:
                    self._answer(self._tickets.get(key), 0.0)
        self._trace.write(record)
        for observer in self._observers:
            observer(record)
        # Work that arrived during the forward is decided on at once.
        self._decide()
        self._check_emptied()

    def _check_emptied(self) -> None:
        if self._emptied is not None and self.scheduler.idle:
            self._emptied.set()

    def _timed_forward(self, batch: Batch, tickets: Sequence[Ticket], record: ForwardRecord) -> list[list[Any]] | None:
        """Runs in the forward thread. One sub-forward: returns one output list
        per slice. Several (similar lengths together, shortest first): hands
        each one's outputs to the loop as soon as it ends, so the short texts
        of a batch are answered without waiting for its long one; returns None."""
        record.start = self._clock()
        try:
            if len(batch.chunks) <= 1:
                parts = [Part(t.prepared, s.start, s.stop) for s, t in zip(batch.slices, tickets, strict=True)]
                return self._checked_forward(parts)
            if batch.deliver_together:
                outputs: list[list[Any]] = [[None] * (s.stop - s.start) for s in batch.slices]
                for chunk in batch.chunks:
                    results = self._checked_forward([Part(tickets[k].prepared, i, i + 1) for k, i in chunk])
                    for (k, i), result in zip(chunk, results, strict=True):
                        outputs[k][i - batch.slices[k].start] = result[0]
                return outputs
            assert self._loop is not None
            for index, chunk in enumerate(batch.chunks):
                results = self._checked_forward([Part(tickets[k].prepared, i, i + 1) for k, i in chunk])
                self._loop.call_soon_threadsafe(self._deliver, batch, index, results, tickets, record)
            return None
        finally:
            record.end = self._clock()

    def _checked_forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        outputs = self._forward(parts)
        if len(outputs) != len(parts):
            raise InferenceError(f"Model '{self.model}' returned {len(outputs)} results for {len(parts)} parts.")
        return outputs

    def _deliver(
        self, batch: Batch, index: int, results: list[list[Any]], tickets: Sequence[Ticket], record: ForwardRecord
    ) -> None:
        """Outputs of one sub-forward, one item per part; the requests it
        completes (``Batch.answered``) are answered now."""
        now = self._clock()
        if index == 0:
            for ticket in tickets:
                self._start_timing(ticket, record)
        for (k, i), result in zip(batch.chunks[index], results, strict=True):
            tickets[k].outputs[i] = result[0]
        answered = batch.answered(index)
        for k in answered:
            self._answer(tickets[k], now - record.start)
        if answered and index < len(batch.chunks) - 1:
            self.scheduler.answered_early(now, len(answered))

    def _fan_out(
        self, batch: Batch, tickets: Sequence[Ticket], outputs: list[list[Any]], record: ForwardRecord
    ) -> None:
        for piece, ticket, out in zip(batch.slices, tickets, outputs, strict=True):
            self._start_timing(ticket, record)
            ticket.timing.inference_s += record.end - record.start
            ticket.outputs[piece.start : piece.stop] = out

    @staticmethod
    def _start_timing(ticket: Ticket, record: ForwardRecord) -> None:
        if ticket.timing.forwards == 0:
            ticket.timing.queue_s = record.start - ticket.admitted
        ticket.timing.forwards += 1

    def _answer(self, ticket: Ticket | None, inference_s: float) -> None:
        """A request the scheduler reports complete (its client may have gone: then nothing)."""
        if ticket is None or ticket.future.done():
            return
        ticket.timing.inference_s += inference_s
        ticket.future.set_result(ticket.outputs)

    def _fail(self, ticket: Ticket | None, error: SiftError) -> None:
        if ticket is not None and not ticket.future.done():
            ticket.future.set_exception(error)


def _copy(error: SiftError) -> SiftError:
    """A fresh instance of ``error`` (one instance raised for many requests would
    gather their tracebacks)."""
    copy = type(error)(error.message, **error.extra)
    copy.retry_after = error.retry_after
    return copy
