"""The worker shell of one model: admission, per-lane queues, the scheduler
task and the executor thread.

All batching decisions are made by the pure policy; this module only turns
them into asyncio waits and forwards. It wakes on events (admission, ingress
change, forward end, cancellation, a policy deadline) and never polls.
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

from sift_server.adapters.base import Part, Prepared
from sift_server.engine.arrivals import ArrivalModel
from sift_server.engine.batch_queue import BatchQueue, Caps, Pending, Slice
from sift_server.engine.clock import Clock, monotonic
from sift_server.engine.ingress import IngressBoard, IngressTicket
from sift_server.engine.policy import Dispatch, LaneView, Policy, SchedulerState, WaitUntil
from sift_server.engine.trace import ForwardRecord, NullTrace, TraceSink
from sift_server.errors import InferenceError, QueueFull, ShuttingDown, SiftError

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
    done_items: int = 0
    timing: RequestTiming = field(default_factory=RequestTiming)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    caps: Caps = field(default_factory=Caps)
    # Caps of drains under sustained load (the model's efficient batch); None: same as ``caps``.
    drain_caps: Caps | None = None
    max_queue_items: int = 512
    default_lane: str = "default"
    # Added to the forward thread's nice value (Linux: per thread); 0 leaves it alone.
    forward_nice: int = 0
    # Yield the CPU right after handing a forward to its thread (see _start_forward).
    yield_on_dispatch: bool = True
    # Arrivals closer than this form one cluster; a cluster after this much quiet is isolated.
    link_gap: float = 0.002
    busy_link_gap: float = 0.050
    quiet_gap: float = 0.005


def _lower_thread_priority(nice: int) -> None:
    if nice > 0 and hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)


class ModelWorker:
    def __init__(
        self,
        model: str,
        forward: ForwardFn,
        policy: Policy,
        config: WorkerConfig = WorkerConfig(),
        *,
        clock: Clock = monotonic,
        trace: TraceSink | None = None,
        observers: Sequence[Callable[[ForwardRecord], None]] = (),
    ) -> None:
        self.model = model
        self.policy = policy
        self.config = config
        self._forward = forward
        self._clock = clock
        self._trace = trace or NullTrace()
        self._observers = list(observers)
        self._queues: dict[str, BatchQueue] = {}
        self._tickets: dict[int, Ticket] = {}
        self._ids = itertools.count()
        self._forward_ids = itertools.count()
        self.ingress = IngressBoard(
            arrivals=ArrivalModel(
                link_gap=config.link_gap, busy_link_gap=config.busy_link_gap, quiet_gap=config.quiet_gap
            ),
            on_change=self._wake,
            has_work=lambda: self.busy or self.queued_requests > 0,
        )
        self.busy = False
        self.draining = False
        self.last_forward_end = float("-inf")
        self.forwards_run = 0
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
        self._drained: asyncio.Event | None = None
        self._stopped = False

    # ---- lifecycle -------------------------------------------------------

    def start(self) -> None:
        """Bind to the running event loop (decisions run as its callbacks)."""
        self._loop = asyncio.get_running_loop()

    async def close(self, grace_s: float, error: SiftError | None = None) -> None:
        """Stop admitting, finish queued and in-flight work within ``grace_s``,
        then fail whatever remains with ``error`` (default: shutting down)."""
        if self._stopped:
            return
        self.draining = True
        self._drained = asyncio.Event()
        self._check_drained()
        self._wake()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), grace_s)
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        failure = error or ShuttingDown("The server is shutting down; the request was not run.")
        for queue in self._queues.values():
            for pending in list(queue.pending):
                self._fail(pending.payload, failure)
            queue.pending.clear()
        # In-flight forwards past the grace period: their requests get the error too.
        for ticket in list(self._tickets.values()):
            self._fail(ticket, failure)
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ---- admission -------------------------------------------------------

    @property
    def queued_items(self) -> int:
        return sum(q.total_items for q in self._queues.values())

    @property
    def queued_requests(self) -> int:
        return sum(len(q) for q in self._queues.values())

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
            if self.draining or self._stopped:
                raise ShuttingDown("The server is shutting down and admits no new work.")
            n_items = len(prepared.item_costs)
            # An empty queue admits any one request (its size was checked at the API).
            queued = self.queued_items
            if queued and queued + n_items > self.config.max_queue_items:
                raise QueueFull(
                    f"Model '{self.model}' has {queued} items queued "
                    f"(limit {self.config.max_queue_items}); retry shortly."
                )
            loop = asyncio.get_running_loop()
            ticket = Ticket(request_id, prepared, loop.create_future(), arrival, now, [None] * n_items)
            key = next(self._ids)
            self._tickets[key] = ticket
            lane_name = lane or self.config.default_lane
            queue = self._queues.get(lane_name)
            if queue is None:
                queue = self._queues[lane_name] = BatchQueue(lane_name)
            pending = Pending(str(key), prepared.item_costs, now, prepared.compat_key, ticket)
            queue.add(pending)
            ticket.future.add_done_callback(lambda fut: self._on_ticket_done(key, lane_name, fut))
        finally:
            # Admission (or its refusal) ends ingress; the queue already holds it.
            if ingress is not None:
                ingress.end()
            # Decide after one loop turn: requests whose tasks are already
            # runnable (the rest of a burst read in the same turn) join first.
            self._wake()
        return ticket

    def _on_ticket_done(self, key: int, lane: str, fut: asyncio.Future[list[Any]]) -> None:
        self._tickets.pop(key, None)
        if fut.cancelled():
            queue = self._queues.get(lane)
            if queue is not None and queue.remove(str(key)) is not None:
                self._wake()

    # ---- scheduling ------------------------------------------------------

    def _wake(self) -> None:
        """Ask for a decision at the next turn of the loop (coalesced). The one
        turn lets requests whose tasks are already runnable be admitted first."""
        if self._decision_pending or self._stopped or self._loop is None:
            return
        self._decision_pending = True
        self._loop.call_soon(self._decide)

    def _state(self) -> SchedulerState:
        lanes = [
            LaneView(
                lane=q.lane,
                head_arrival=q.pending[0].arrival,
                last_arrival=q.pending[-1].arrival,
                requests=len(q),
                fills_cap=q.would_fill(self.config.caps),
            )
            for q in self._queues.values()
            if q.pending
        ]
        return SchedulerState(
            lanes=lanes,
            busy=self.busy,
            last_forward_end=self.last_forward_end,
            ingress_pending=self.ingress.pending,
            arrivals=self.ingress.arrivals,
            draining=self.draining,
        )

    def _decide(self) -> None:
        """Apply the policy: start a forward, or arm a timer for its deadline.
        Runs on every event; there is no scheduler task and no polling."""
        self._decision_pending = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._stopped or self._loop is None:
            return
        now = self._clock()
        decision = self.policy.decide(self._state(), now)
        if isinstance(decision, Dispatch):
            self._start_forward(decision, now)
        elif isinstance(decision, WaitUntil):
            self._timer = self._loop.call_later(max(0.0, decision.deadline - now), self._wake)
        else:
            self._check_drained()

    def _start_forward(self, decision: Dispatch, decided: float) -> None:
        assert self._loop is not None
        queue = self._queues[decision.lane]
        caps = self.config.caps
        if decision.reason == "drain" and self.config.drain_caps is not None and not self.draining:
            caps = self.config.drain_caps
        slices = queue.take(caps)
        if not slices:
            return
        tickets: list[Ticket] = [s.pending.payload for s in slices]
        record = ForwardRecord(
            model=self.model,
            lane=decision.lane,
            forward_id=next(self._forward_ids),
            reason=decision.reason,
            request_ids=[t.request_id for t in tickets],
            arrivals=[t.arrival for t in tickets],
            admitted=[t.admitted for t in tickets],
            items=sum(s.stop - s.start for s in slices),
            cost=sum(s.cost for s in slices),
            decided=decided,
        )
        parts = [Part(t.prepared, s.start, s.stop) for s, t in zip(slices, tickets, strict=True)]
        self.busy = True
        running = self._loop.run_in_executor(self._executor, self._timed_forward, parts, record)
        running.add_done_callback(lambda fut: self._forward_done(fut, slices, tickets, record))
        if self.config.yield_on_dispatch:
            # Give the forward thread the GIL and the core now: otherwise it waits
            # for this loop turn's bookkeeping, which is off the critical path.
            os.sched_yield()

    def _forward_done(
        self, fut: asyncio.Future[list[list[Any]]], slices: list[Slice], tickets: list[Ticket], record: ForwardRecord
    ) -> None:
        try:
            exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
            if exc is not None:
                log.error("forward %s of model %s failed: %r", record.forward_id, self.model, exc)
                record.error = f"{type(exc).__name__}: {exc}"
                failure = InferenceError(f"Internal error while running model '{self.model}'.")
                for ticket in tickets:
                    self._fail(ticket, failure)
            else:
                self._fan_out(slices, tickets, fut.result(), record)
        finally:
            self.busy = False
            self.forwards_run += 1
            self.last_forward_end = self._clock()
            self._trace.write(record)
            for observer in self._observers:
                observer(record)
        # Work that arrived during the forward is decided on at once.
        self._decide()
        self._check_drained()

    def _check_drained(self) -> None:
        if self._drained is not None and not self.busy and not self.queued_requests:
            self._drained.set()

    def _timed_forward(self, parts: Sequence[Part], record: ForwardRecord) -> list[list[Any]]:
        record.start = self._clock()
        try:
            return self._forward(parts)
        finally:
            record.end = self._clock()

    def _fan_out(
        self, slices: Sequence[Slice], tickets: Sequence[Ticket], outputs: list[list[Any]], record: ForwardRecord
    ) -> None:
        if len(outputs) != len(slices):
            failure = InferenceError(
                f"Model '{self.model}' returned {len(outputs)} results for {len(slices)} requests."
            )
            for ticket in tickets:
                self._fail(ticket, failure)
            return
        for piece, ticket, out in zip(slices, tickets, outputs, strict=True):
            if ticket.future.done():
                continue  # its client went away mid-forward: drop the result
            if ticket.timing.forwards == 0:
                ticket.timing.queue_s = record.start - ticket.admitted
            ticket.timing.forwards += 1
            ticket.timing.inference_s += record.end - record.start
            ticket.outputs[piece.start : piece.stop] = out
            ticket.done_items += piece.stop - piece.start
            if ticket.done_items == len(ticket.outputs):
                ticket.future.set_result(ticket.outputs)

    def _fail(self, ticket: Ticket, error: SiftError) -> None:
        if not ticket.future.done():
            ticket.future.set_exception(error)
