"""A discrete-event loop that drives the server's own scheduler on a virtual clock.

The worker shell (``engine/worker.py``) and this loop drive the very same
``Scheduler`` object (queues, busy state, admission, the arrival, wave and
forward-cost models): the shell with asyncio and a thread, this loop with
events on a heap. What differs is only time: header arrivals and admissions
come from a client model, and a forward ends after the forward model's time.

The shell decides on admission, ingress end, forward end and a ``WaitUntil``
deadline (a header arrival only updates the ingress count), so those are the
events at which this loop asks ``Scheduler.decide``:

* ``Dispatch``: ``Scheduler.take`` forms the batch; its forward ends at
  ``now + F(batch)``, when ``Scheduler.complete`` is told. A batch cut into
  sub-forwards answers each request when the sub-forward holding its last
  item ends, as the worker does (unless the batch says ``deliver_together``);
* ``WaitUntil(t)``: a timer re-decides at ``t`` (a newer event re-decides
  earlier and replaces the timer);
* ``Idle``: nothing happens until the next event.

With a ``SharedLoop`` (a server whose event loop shares the forward's core),
each request is read and each answer written by the loop one after the
other: a header arrives when the loop starts reading it, not when the client
sent it, an answer leaves when the loop has written it, and a forward ends
once it has had its seconds of the core around the loop's work (checked again
when its end comes, as later reads may have pushed it). Latencies are then
measured as the client sees them, from sending to receiving.

An open loop's requests are all known at the start; with a shared loop each
one takes its place in the loop's work when it is sent (a ``SEND`` event).

Events at the same instant run in a fixed order (forward end, header arrival,
admission, timer, early answer, send), then in scheduling order, so a run is
deterministic. An early answer of a sub-forward decides nothing (the worker
is busy until its batch ends).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Literal, Protocol, runtime_checkable

from sift_bench.simulate.shared_loop import SharedLoop
from sift_bench.simulate.traces import Arrival, Client
from sift_server.engine.batch_queue import BatchQueue, Caps
from sift_server.engine.policy import Decision, Dispatch, Idle, SchedulerState, WaitUntil
from sift_server.engine.scheduler import Batch, Scheduler, SchedulerConfig

# What a queued request's ``Pending.arrival`` holds: the time it was admitted
# (what the worker shell stores) or the time its headers arrived.
PendingTime = Literal["arrival", "admission"]
DEFAULT_LANE = "default"


@runtime_checkable
class ForwardModel(Protocol):
    """Seconds of one forward, given each item's cost (tokens)."""

    def batch_seconds(self, costs: Sequence[int]) -> float: ...


class SimPolicy(Protocol):
    """What the loop needs of a policy: ``engine.policy.Policy`` with a
    read-only ``name`` (so frozen dataclass policies type-check too)."""

    @property
    def name(self) -> str: ...

    def decide(self, state: SchedulerState, now: float) -> Decision: ...


class SimulationError(RuntimeError):
    """The loop reached a state the worker shell could not be in."""


class EventKind(IntEnum):
    FORWARD_END = 0
    ARRIVAL = 1
    ADMISSION = 2
    WAKE = 3
    DELIVERY = 4
    # An open loop's request, known from the start, reaching the shared loop when sent.
    SEND = 5


@dataclass(slots=True)
class SimRequest:
    request_id: str
    lane: str
    arrival: float
    admission: float
    items: int
    cost: int
    group: int | None
    scored: bool
    # Start of the first forward that ran any of its items, end of the last one.
    start: float = math.nan
    end: float = math.nan
    forwards: list[int] = field(default_factory=list)
    # With a shared loop: when the client sent it and when its answer left the server.
    sent: float = math.nan
    received: float = math.nan

    @property
    def queue_delay(self) -> float:
        return self.start - self.admission

    @property
    def latency(self) -> float:
        end = self.end if math.isnan(self.received) else self.received
        return end - (self.arrival if math.isnan(self.sent) else self.sent)

    @property
    def done(self) -> bool:
        return not math.isnan(self.end)


@dataclass(frozen=True, slots=True)
class SimForward:
    forward_id: int
    lane: str
    reason: str
    start: float
    end: float
    request_ids: tuple[str, ...]
    items: int
    cost: int

    @property
    def size(self) -> int:
        return len(self.request_ids)


@dataclass(slots=True)
class SimResult:
    policy: str
    family: str
    kind: str
    forward: str
    requests: list[SimRequest]
    forwards: list[SimForward]
    events: int
    decisions: int
    end_time: float
    decision_log: list[tuple[float, Decision]] | None = None


@dataclass(order=True, slots=True)
class _Event:
    time: float
    kind: EventKind
    seq: int
    payload: object = field(compare=False)


def _default_lane(arrival: Arrival) -> str:
    return DEFAULT_LANE


def _seconds(forward: Callable[[int], float] | ForwardModel, costs: Sequence[int]) -> float:
    if hasattr(forward, "batch_seconds"):
        return float(forward.batch_seconds(costs))
    assert callable(forward)
    return float(forward(len(costs)))


class EngineSim:
    """One model's scheduler under one policy, fed by one client."""

    def __init__(
        self,
        policy: SimPolicy,
        forward: Callable[[int], float] | ForwardModel,
        client: Client,
        *,
        caps: Caps | None = None,
        config: SchedulerConfig | None = None,
        pending_time: PendingTime = "admission",
        wake_on_header: bool = False,
        lane_of: Callable[[Arrival], str] = _default_lane,
        forward_name: str = "",
        log_decisions: bool = False,
        max_events: int = 50_000_000,
        arm: str | None = None,
        queue_factory: Callable[[str], BatchQueue] = BatchQueue,
        loop: SharedLoop | None = None,
        scheduler: Callable[..., Scheduler] = Scheduler,
    ) -> None:
        self.policy = policy
        self.loop = loop
        self.arm = arm or policy.name
        self.forward = forward
        self.client = client
        # The server's own scheduler settings unless told otherwise, so the simulator replays what it runs.
        config = config if config is not None else SchedulerConfig()
        if caps is not None:
            config = replace(config, caps=caps)
        # ``scheduler``: an arm's variant of the server's (simulator.old_rules.ArmScheduler).
        self.scheduler = scheduler(policy, config, queue_factory=queue_factory)
        if isinstance(forward, ForwardModel):
            # As the server's calibration after load: the cut by length uses only a seeded cost.
            tokens = int(getattr(forward, "typical_tokens", 32))
            self.scheduler.seed_costs([(n * tokens, forward.batch_seconds([tokens] * n)) for n in (1, 4, 16, 64)])
        self.caps = config.caps
        self.pending_time: PendingTime = pending_time
        self.wake_on_header = wake_on_header
        self.lane_of = lane_of
        self.forward_name = forward_name or getattr(forward, "name", "forward")
        self.max_events = max_events
        self.decision_log: list[tuple[float, Decision]] | None = [] if log_decisions else None

        self.now = 0.0
        self.requests: dict[str, SimRequest] = {}
        self.forwards: list[SimForward] = []
        # The running batch, its start, and the core seconds it needs in all.
        self._running: tuple[Batch, float, float] | None = None
        self._heap: list[_Event] = []
        self._seq = 0
        self._timer_deadline: float | None = None
        self._timer_gen = 0
        self._events = 0
        self._decisions = 0

    # -- the loop -----------------------------------------------------------

    def run(self) -> SimResult:
        for arrival in self.client.start():
            self._accept(arrival)
        while self._heap:
            event = heapq.heappop(self._heap)
            if event.kind is EventKind.WAKE and event.payload != self._timer_gen:
                continue  # a timer that a newer decision replaced
            self._events += 1
            if self._events > self.max_events:
                raise SimulationError(f"more than {self.max_events} events: the run does not end")
            self.now = event.time
            self._handle(event)
            if event.kind in (EventKind.DELIVERY, EventKind.SEND):
                continue
            if event.kind is not EventKind.ARRIVAL or self.wake_on_header:
                self._decide()
        self._check_finished()
        return SimResult(
            policy=self.arm,
            family=self.client.family,
            kind=self.client.kind,
            forward=self.forward_name,
            requests=list(self.requests.values()),
            forwards=self.forwards,
            events=self._events,
            decisions=self._decisions,
            end_time=self.now,
            decision_log=self.decision_log,
        )

    def _push(self, time: float, kind: EventKind, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, _Event(time, kind, self._seq, payload))

    def _accept(self, arrival: Arrival) -> None:
        if self.loop is not None and self.client.kind == "open" and arrival.arrival > self.now:
            # The loop does its work in order: a request of an open loop (all known at
            # the start) takes its place in it when it is sent, not before the answers
            # written meanwhile.
            self._push(arrival.arrival, EventKind.SEND, arrival)
            return
        if arrival.arrival < self.now:
            raise SimulationError(f"{arrival.request_id} arrives in the past ({arrival.arrival} < {self.now})")
        if arrival.request_id in self.requests:
            raise SimulationError(f"duplicate request id {arrival.request_id}")
        sent = math.nan
        if self.loop is not None:
            sent = arrival.arrival
            header, admission = self.loop.reserve(arrival.arrival, self.loop.read)
            arrival = replace(arrival, arrival=header, admission=admission)
        self.requests[arrival.request_id] = SimRequest(
            request_id=arrival.request_id,
            lane=self.lane_of(arrival),
            arrival=arrival.arrival,
            admission=arrival.admission,
            items=arrival.items,
            cost=arrival.cost,
            group=arrival.group,
            scored=arrival.scored,
            sent=sent,
        )
        self._push(arrival.arrival, EventKind.ARRIVAL, arrival)
        self._push(arrival.admission, EventKind.ADMISSION, arrival)

    def _handle(self, event: _Event) -> None:
        if event.kind is EventKind.ARRIVAL:
            self.scheduler.header_arrived(self.now)
        elif event.kind is EventKind.ADMISSION:
            assert isinstance(event.payload, Arrival)
            self._admit(event.payload)
        elif event.kind is EventKind.FORWARD_END:
            self._end_forward()
        elif event.kind is EventKind.SEND:
            assert isinstance(event.payload, Arrival)
            self._accept(event.payload)
        elif event.kind is EventKind.DELIVERY:
            assert isinstance(event.payload, tuple)
            answered, work = event.payload
            if self._deferred(work, EventKind.DELIVERY, event.payload):
                return
            self.scheduler.answered_early(self.now, len(answered))
            self._answer(answered)
        else:
            self._timer_deadline = None

    def _admit(self, arrival: Arrival) -> None:
        self.scheduler.ingress_ended()
        stamp = arrival.arrival if self.pending_time == "arrival" else arrival.admission
        self.scheduler.admit(
            arrival.request_id,
            [arrival.cost] * arrival.items,
            stamp,
            lane=self.requests[arrival.request_id].lane,
        )

    def _deferred(self, work: float, kind: EventKind, payload: object) -> bool:
        """With a shared loop, an event of the running forward that comes once it
        has had ``work`` seconds of the core: pushed later if the loop's work
        reserved since its dispatch moved that time."""
        if self.loop is None or self._running is None:
            return False
        due = self.loop.finish(self._running[1], work)
        if due <= self.now + 1e-12:
            return False
        self._push(due, kind, payload)
        return True

    def _end_forward(self) -> None:
        assert self._running is not None
        batch, started, work = self._running
        if self._deferred(work, EventKind.FORWARD_END, None):
            return
        self._running = None
        if self.loop is not None:  # the loop's work may have moved its end
            self.forwards[-1] = replace(self.forwards[-1], end=self.now)
        done = self.scheduler.complete(batch, started, self.now)
        self._answer([rid for rid in done.finished if not self.requests[rid].done])

    def _answer(self, request_ids: Sequence[str]) -> None:
        released: list[Arrival] = []
        for request_id in request_ids:
            request = self.requests[request_id]
            request.end = received = self.now
            if self.loop is not None:
                _, received = self.loop.reserve(self.now, self.loop.write)
                request.received = received
            released.extend(self.client.on_complete(request_id, received))
        # The loop reads them in the order they are sent.
        for arrival in sorted(released, key=lambda a: a.arrival):
            self._accept(arrival)

    # -- deciding -----------------------------------------------------------

    def state(self) -> SchedulerState:
        return self.scheduler.state(self.now)

    def _decide(self) -> None:
        decision = self.scheduler.decide(self.now)
        self._decisions += 1
        if self.decision_log is not None:
            self.decision_log.append((self.now, decision))
        if isinstance(decision, Dispatch):
            self._cancel_timer()
            self._dispatch(decision)
        elif isinstance(decision, WaitUntil):
            if not decision.deadline > self.now:
                raise SimulationError(
                    f"{self.policy.name} asked to wait until {decision.deadline!r} at {self.now!r}: a shell would spin"
                )
            if decision.deadline != self._timer_deadline:
                self._timer_gen += 1
                self._timer_deadline = decision.deadline
                self._push(decision.deadline, EventKind.WAKE, self._timer_gen)
        elif isinstance(decision, Idle):
            self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self._timer_deadline is not None:
            self._timer_gen += 1
            self._timer_deadline = None

    def _dispatch(self, decision: Dispatch) -> None:
        if self._running is not None:
            raise SimulationError(f"{self.policy.name} dispatched while a forward runs")
        batch = self.scheduler.take(decision, self.now)
        if batch is None:
            raise SimulationError(f"{self.policy.name} dispatched empty lane {decision.lane!r}")
        forward_id = len(self.forwards)
        work = 0.0
        for index, chunk in enumerate(batch.chunks):
            work += _seconds(self.forward, [batch.item_cost(at) for at in chunk])
            answered = tuple(batch.slices[k].pending.request_id for k in batch.answered(index))
            if answered and index < len(batch.chunks) - 1 and not batch.deliver_together:
                self._push(self._finish(work), EventKind.DELIVERY, (answered, work))
        end = self._finish(work)
        for piece in batch.slices:
            request = self.requests[piece.pending.request_id]
            if math.isnan(request.start):
                request.start = self.now
            request.forwards.append(forward_id)
        self.forwards.append(
            SimForward(
                forward_id=forward_id,
                lane=decision.lane,
                reason=decision.reason,
                start=self.now,
                end=end,
                request_ids=tuple(batch.request_ids),
                items=batch.items,
                cost=batch.cost,
            )
        )
        self._running = (batch, self.now, work)
        self._push(end, EventKind.FORWARD_END, forward_id)

    def _finish(self, work: float) -> float:
        """When a forward dispatched now has had ``work`` seconds of the core."""
        if self.loop is None:
            return self.now + work
        self.loop.forget(self.now)
        return self.loop.finish(self.now, work)

    def _check_finished(self) -> None:
        unfinished = [r.request_id for r in self.requests.values() if not r.done]
        if unfinished or self._running or self.scheduler.ingress_pending or self.scheduler.queued_requests:
            raise SimulationError(
                f"{self.policy.name} left work behind: {len(unfinished)} unfinished requests "
                f"(e.g. {unfinished[:3]}), busy={self._running is not None}, "
                f"ingress={self.scheduler.ingress_pending}"
            )


def simulate(
    policy: SimPolicy,
    forward: Callable[[int], float] | ForwardModel,
    client: Client,
    *,
    caps: Caps | None = None,
    config: SchedulerConfig | None = None,
    pending_time: PendingTime = "admission",
    log_decisions: bool = False,
    loop: SharedLoop | None = None,
) -> SimResult:
    """Run one client through one policy on a fresh scheduler."""
    sim = EngineSim(
        policy,
        forward,
        client,
        caps=caps,
        config=config,
        pending_time=pending_time,
        log_decisions=log_decisions,
        loop=loop,
    )
    return sim.run()
