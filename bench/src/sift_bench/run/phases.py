"""The load phases of one run: warmup, sequential, bursts, closed loop, open loop.

Every request carries a unique id (sent as ``X-Request-ID``, so the server's
trace names it) and records the client's ``perf_counter`` just before the call
and just after the validated answer. Failures never raise: they are recorded
as invalid responses (a phase stops early once too many have failed).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sift_bench.client.answer import Transport
from sift_bench.workload.arrivals import ARRIVAL_KINDS, ArrivalKind, open_schedule

PhaseKind = Literal["sequential", "burst", "closed", "open"]


class PhaseAborted(RuntimeError):
    """Too many failed requests: the server is gone or broken."""


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    group: int  # burst index (bursts), client slot (closed loop), -1 (sequential)
    send: float
    recv: float
    ok: bool
    status: int | None = None
    error: str | None = None
    issued: float | None = None  # handed to the HTTP stack
    texts: Sequence[str] = ()  # what it sent (the in-process replay runs the same texts)
    scheduled: float | None = None  # open loop: when the schedule said to send it


@dataclass(slots=True)
class PhaseResult:
    name: str
    kind: PhaseKind
    size: int  # burst size or requests in flight (1 when sequential)
    requests: list[RequestRecord] = field(default_factory=list)
    # Request ids of each measured burst, in release order.
    groups: list[list[str]] = field(default_factory=list)
    # Requests that were sent but are not measured (the burst phases' priming burst).
    unmeasured: list[RequestRecord] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    # Open loop: the arrivals' kind, the offered requests/s, its share of the capacity
    # and the schedule's length (its count over that length: the rate this draw offered).
    arrivals: str = ""
    rate: float = 0.0
    load: float = 0.0
    seconds: float = 0.0

    @property
    def invalid(self) -> list[RequestRecord]:
        return [r for r in (*self.requests, *self.unmeasured) if not r.ok]

    @property
    def throughput(self) -> float:
        """Valid requests per second over the phase's window (closed loop)."""
        span = self.end - self.start
        return sum(r.ok for r in self.requests) / span if span > 0 else 0.0


@dataclass(slots=True)
class PhaseContext:
    transport: Transport
    texts: Sequence[str]
    prefix: str
    items_per_request: int = 1
    progress: Callable[[int], None] = lambda n: None
    max_errors: int = 20
    errors: int = 0
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def next_request(self, phase: str) -> tuple[str, list[str]]:
        index = next(self._counter)
        start = index * self.items_per_request
        texts = [self.texts[(start + k) % len(self.texts)] for k in range(self.items_per_request)]
        return f"{self.prefix}-{phase}-{index:06d}", texts

    async def send(self, phase: str, group: int) -> RequestRecord:
        request_id, texts = self.next_request(phase)
        return await self.send_prepared(request_id, texts, group)

    async def send_prepared(
        self, request_id: str, texts: list[str], group: int, scheduled: float | None = None
    ) -> RequestRecord:
        send = time.perf_counter()
        outcome = await self.transport.send(request_id, texts)
        recv = time.perf_counter()
        self.progress(1)
        if not outcome.ok:
            self.errors += 1
        return RequestRecord(
            request_id, group, send, recv, outcome.ok, outcome.status, outcome.error, outcome.issued, texts, scheduled
        )

    def check(self) -> None:
        if self.errors > self.max_errors:
            raise PhaseAborted(f"{self.errors} failed requests; stopping the run")


async def sequential(ctx: PhaseContext, name: str, count: int) -> PhaseResult:
    """``count`` requests, one at a time, each sent when the previous answered."""
    result = PhaseResult(name, "sequential", 1, start=time.perf_counter())
    for _ in range(count):
        result.requests.append(await ctx.send(name, -1))
        ctx.check()
    result.end = time.perf_counter()
    return result


async def _release_burst(ctx: PhaseContext, name: str, size: int, group: int, gap_s: float) -> list[RequestRecord]:
    """Park ``size`` requests on an event, wait ``gap_s`` of idleness, release them together."""
    go = asyncio.Event()
    parked = 0
    prepared = [ctx.next_request(name) for _ in range(size)]

    async def one(request_id: str, texts: list[str]) -> RequestRecord:
        nonlocal parked
        parked += 1
        await go.wait()
        return await ctx.send_prepared(request_id, texts, group)

    tasks = [asyncio.create_task(one(rid, texts)) for rid, texts in prepared]
    await asyncio.sleep(gap_s)
    while parked < size:
        await asyncio.sleep(0)
    go.set()
    return list(await asyncio.gather(*tasks))


async def bursts(
    ctx: PhaseContext, name: str, size: int, count: int, gap_s: float, *, prime: bool = True
) -> PhaseResult:
    """``count`` bursts of ``size`` concurrent requests, each after an idle gap.

    With ``prime``, one unmeasured burst first opens ``size`` keep-alive
    connections, so measured bursts do not pay for TCP connects."""
    result = PhaseResult(name, "burst", size, start=time.perf_counter())
    if prime:
        result.unmeasured.extend(await _release_burst(ctx, name + "-prime", size, -1, gap_s))
        ctx.check()
    for index in range(count):
        records = await _release_burst(ctx, name, size, index, gap_s)
        result.requests.extend(records)
        result.groups.append([r.request_id for r in records])
        ctx.check()
    result.end = time.perf_counter()
    return result


async def closed_loop(ctx: PhaseContext, name: str, concurrency: int, seconds: float) -> PhaseResult:
    """``concurrency`` clients, each sending its next request when the previous
    one answered, starting new ones for ``seconds``. The window runs from the
    start to the last answer."""
    result = PhaseResult(name, "closed", concurrency)
    start = time.perf_counter()
    deadline = start + seconds

    async def client(slot: int) -> None:
        while time.perf_counter() < deadline:
            result.requests.append(await ctx.send(name, slot))
            ctx.check()

    await asyncio.gather(*(client(slot) for slot in range(concurrency)))
    result.start = start
    result.end = max((r.recv for r in result.requests), default=time.perf_counter())
    return result


async def open_loop(ctx: PhaseContext, name: str, times: Sequence[float], *, arrivals: str = "", rate: float = 0.0,
                    load: float = 0.0, seconds: float = 0.0) -> PhaseResult:  # fmt: skip
    """Independent users: one request at each of ``times`` (seconds from the
    phase's start; ``sift_bench.workload.arrivals``), whatever the answers. Each
    request records when it was scheduled, so a client that falls behind its
    schedule shows (``send - scheduled``). The window runs from the start to the
    last answer."""
    result = PhaseResult(name, "open", 0, arrivals=arrivals, rate=rate, load=load, seconds=seconds)
    prepared = [ctx.next_request(name) for _ in times]
    tasks: list[asyncio.Task[RequestRecord]] = []
    start = time.perf_counter()
    for at, (request_id, texts) in zip(times, prepared, strict=True):
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(ctx.send_prepared(request_id, texts, -1, start + at)))
        ctx.check()
    result.requests = list(await asyncio.gather(*tasks))
    ctx.check()
    result.start = start
    result.end = max((r.recv for r in result.requests), default=time.perf_counter())
    return result


@dataclass(frozen=True, slots=True)
class PhasePlan:
    """Sizes of one run's phases."""

    sequential: int = 200
    bursts: int = 24
    burst_sizes: tuple[int, ...] = (8, 32)
    closed_seconds: float = 15.0
    concurrencies: tuple[int, ...] = (8, 32)
    burst_gap_s: float = 0.25
    settle_s: float = 0.5
    warmup_sequential: int = 20
    warmup_closed_s: float = 2.0
    # Open loops after the closed ones: each kind of arrivals at each share of the
    # closed-loop capacity (requests/s, measured once per bench: ``run.runner``).
    open_loads: tuple[float, ...] = ()
    open_arrivals: tuple[ArrivalKind, ...] = ARRIVAL_KINDS
    open_seconds: float = 10.0

    def open_phases(self) -> list[tuple[str, ArrivalKind, float]]:
        """(name, arrivals, load) of each open-loop phase, in the order they run."""
        return [(open_phase_name(kind, load), kind, load) for kind in self.open_arrivals for load in self.open_loads]

    def phase_names(self) -> list[str]:
        return (
            ["sequential"]
            + [f"burst{size}" for size in self.burst_sizes]
            + [f"closed{conc}" for conc in self.concurrencies]
            + [name for name, _, _ in self.open_phases()]
        )

    def expected_requests(self) -> int:
        """Measured requests outside the closed loop (for progress bars)."""
        return self.sequential + self.bursts * sum(self.burst_sizes)


async def warmup(ctx: PhaseContext, plan: PhasePlan, out: list[PhaseResult]) -> None:
    """Every shape once, not measured: sequential, one burst of each size, a short closed loop."""
    out.append(await sequential(ctx, "warmup-seq", plan.warmup_sequential))
    for size in plan.burst_sizes:
        out.append(await bursts(ctx, f"warmup-burst{size}", size, 1, plan.burst_gap_s, prime=False))
    if plan.concurrencies and plan.warmup_closed_s > 0:
        out.append(await closed_loop(ctx, "warmup-closed", max(plan.concurrencies), plan.warmup_closed_s))


def open_phase_name(kind: str, load: float) -> str:
    return f"open{round(load * 100)}-{kind}"


def open_seed(seed: int, trial: int, name: str) -> int:
    """The schedule of one open-loop phase: the same for every arm of a trial."""
    return zlib.crc32(f"{seed}:{trial}:{name}".encode())


async def run_phases(
    ctx: PhaseContext,
    plan: PhasePlan,
    warm: list[PhaseResult],
    measured: list[PhaseResult],
    on_phase: Callable[[str], None] = lambda name: None,
    *,
    capacity: float | None = None,
    seed: int = 0,
    trial: int = 0,
) -> None:
    """Warmup, then the measured phases in their fixed order with an idle settle
    before each. Results are appended as phases finish, so an aborted run keeps
    what it measured. The open loops run at their shares of ``capacity``
    (requests/s), on schedules fixed by ``seed`` and ``trial`` (every arm of a
    trial sees the same arrivals)."""
    on_phase("warmup")
    await warmup(ctx, plan, warm)
    await asyncio.sleep(plan.settle_s)
    on_phase("sequential")
    measured.append(await sequential(ctx, "sequential", plan.sequential))
    for size in plan.burst_sizes:
        await asyncio.sleep(plan.settle_s)
        on_phase(f"burst{size}")
        measured.append(await bursts(ctx, f"burst{size}", size, plan.bursts, plan.burst_gap_s))
    for conc in plan.concurrencies:
        await asyncio.sleep(plan.settle_s)
        on_phase(f"closed{conc}")
        measured.append(await closed_loop(ctx, f"closed{conc}", conc, plan.closed_seconds))
    if plan.open_loads and capacity is None:
        raise ValueError("open-loop phases need the closed-loop capacity")
    for name, kind, load in plan.open_phases():
        assert capacity is not None
        rate = load * capacity
        times = open_schedule(kind, rate, plan.open_seconds, open_seed(seed, trial, name))
        await asyncio.sleep(plan.settle_s)
        on_phase(name)
        measured.append(
            await open_loop(ctx, name, times, arrivals=kind, rate=rate, load=load, seconds=plan.open_seconds)
        )
