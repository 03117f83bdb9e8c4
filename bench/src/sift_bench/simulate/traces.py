"""Arrival traces as clients the simulation loop talks to.

A client hands out arrivals and hears about completions, so closed-loop
traffic (a sequential caller, bursts released after the previous one
finished) is generated interactively, and open-loop traffic (Poisson) is
just a client that ignores completions.

Each arrival carries its header-arrival time and its admission time. Ingress
(read, decode, tokenize) is modelled as one server queue: requests are
ingested one after another, ``admission_k = max(arrival_k, admission_{k-1}) +
ingress``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from sift_bench.workload.arrivals import ArrivalKind, open_schedule

DEFAULT_INGRESS = 0.00015
DEFAULT_COST = 12

Kind = Literal["sequential", "bursts", "poisson", "replay", "closed", "open"]
# Text lengths of a closed loop: every text ``DEFAULT_COST`` tokens, user-like
# ``mixed`` lengths, or ``sentences`` only (the bench's ``sentences`` workload).
Lengths = Literal["fixed", "mixed", "sentences"]


@dataclass(frozen=True, slots=True)
class Arrival:
    request_id: str
    arrival: float
    admission: float
    items: int = 1
    # Tokens per item.
    cost: int = DEFAULT_COST
    # Burst index for burst traffic, None otherwise.
    group: int | None = None
    # Warm-up requests run like any other but are left out of the figures.
    scored: bool = True

    def __post_init__(self) -> None:
        if self.admission < self.arrival:
            raise ValueError(f"{self.request_id}: admitted before it arrived")
        if self.items < 1:
            raise ValueError(f"{self.request_id}: a request has at least one item")


class IngressQueue:
    """A single-server FIFO: the time the server spends reading one request."""

    def __init__(self, delay: float = DEFAULT_INGRESS) -> None:
        if delay < 0:
            raise ValueError("ingress delay must be >= 0")
        self.delay = delay
        self._free_at = -math.inf
        self._last_arrival = -math.inf

    def admit(self, arrival: float) -> float:
        """Admission time of a request whose headers arrive at ``arrival``
        (calls must come in arrival order)."""
        if arrival < self._last_arrival:
            raise ValueError("ingress must see arrivals in time order")
        self._last_arrival = arrival
        self._free_at = max(arrival, self._free_at) + self.delay
        return self._free_at


class Client(Protocol):
    family: str
    kind: Kind

    def start(self) -> list[Arrival]:
        """Arrivals known at the start of the run."""
        ...

    def on_complete(self, request_id: str, now: float) -> list[Arrival]:
        """A request's response reached the client at ``now``; returns the
        arrivals this releases (none before ``now``)."""
        ...


@dataclass(slots=True)
class SequentialClient:
    """Closed loop: one request in flight; the next one leaves ``think_time``
    after the previous response."""

    n: int
    think_time: float
    ingress: IngressQueue = field(default_factory=IngressQueue)
    items: int = 1
    cost: int = DEFAULT_COST
    warmup: int = 0
    family: str = "sequential"
    kind: Kind = "sequential"
    _issued: int = field(default=0, init=False)

    def start(self) -> list[Arrival]:
        return self._issue(0.0) if self.n > 0 else []

    def on_complete(self, request_id: str, now: float) -> list[Arrival]:
        if self._issued >= self.n:
            return []
        return self._issue(now + self.think_time)

    def _issue(self, at: float) -> list[Arrival]:
        index = self._issued
        self._issued += 1
        return [
            Arrival(
                request_id=f"s{index}",
                arrival=at,
                admission=self.ingress.admit(at),
                items=self.items,
                cost=self.cost,
                scored=index >= self.warmup,
            )
        ]


@dataclass(slots=True)
class BurstClient:
    """Closed loop of bursts: ``size`` requests released together, each
    header jittered uniformly in ``[0, jitter_max]``; the next burst leaves
    ``idle_gap`` after the previous burst's last response."""

    size: int
    count: int
    jitter_max: float
    idle_gap: float
    seed: int
    ingress: IngressQueue = field(default_factory=IngressQueue)
    items: int = 1
    cost: int = DEFAULT_COST
    warmup: int = 1
    family: str = "bursts"
    kind: Kind = "bursts"
    _rng: random.Random = field(init=False)
    _released: int = field(default=0, init=False)
    _outstanding: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        if self.size < 1 or self.count < 0 or self.jitter_max < 0 or self.idle_gap < 0:
            raise ValueError("invalid burst trace parameters")
        self._rng = random.Random(f"bursts:{self.seed}")

    def start(self) -> list[Arrival]:
        return self._release(0.0) if self.count > 0 else []

    def on_complete(self, request_id: str, now: float) -> list[Arrival]:
        self._outstanding.discard(request_id)
        if self._outstanding or self._released >= self.count:
            return []
        return self._release(now + self.idle_gap)

    def _release(self, at: float) -> list[Arrival]:
        burst = self._released
        self._released += 1
        offsets = sorted(self._rng.uniform(0.0, self.jitter_max) for _ in range(self.size))
        arrivals = []
        for index, offset in enumerate(offsets):
            request_id = f"b{burst}.{index}"
            self._outstanding.add(request_id)
            arrivals.append(
                Arrival(
                    request_id=request_id,
                    arrival=at + offset,
                    admission=self.ingress.admit(at + offset),
                    items=self.items,
                    cost=self.cost,
                    group=burst,
                    scored=burst >= self.warmup,
                )
            )
        return arrivals


def sentence_cost(rng: random.Random) -> int:
    """Tokens of one English sentence of 5-40 words (with its two special tokens)."""
    return 2 + round(rng.randint(5, 40) * 1.3)


def mixed_cost(rng: random.Random, max_tokens: int = 256) -> int:
    """Tokens of one text from a user-like mix: mostly sentences of 5-40
    words, one in twenty a long passage near the model's limit."""
    if rng.random() < 0.05:
        return rng.randint(max_tokens * 3 // 4, max_tokens)
    return sentence_cost(rng)


@dataclass(slots=True)
class ClosedLoopClient:
    """``clients`` callers, each sending its next request ``turnaround``
    (± ``jitter``) after its previous answer, ``per_client`` requests each, one
    text per request of ``lengths`` (``mixed_cost``, ``sentence_cost``, or
    ``fixed_cost`` tokens each). The first ``warmup`` requests of each caller
    are not scored.

    ``client_cost`` > 0 is a client on one core of its own that handles one
    answer after the other (an HTTP client library in Python spends about a
    millisecond on each): the answers of one forward come back as requests
    spread over ``client_cost`` each, not within the turnaround's jitter."""

    clients: int
    per_client: int
    turnaround: float
    jitter: float
    seed: int
    ingress: IngressQueue = field(default_factory=IngressQueue)
    lengths: Lengths = "mixed"
    fixed_cost: int = DEFAULT_COST
    max_tokens: int = 256
    warmup: int = 5
    client_cost: float = 0.0
    family: str = "closed"
    kind: Kind = "closed"
    _rng: random.Random = field(init=False)
    _sent: dict[int, int] = field(default_factory=dict, init=False)
    _last: float = field(default=0.0, init=False)
    # When the client's core is free to handle the next answer.
    _client_free: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if (
            self.clients < 1
            or self.per_client < 1
            or self.turnaround < 0
            or not 0 <= self.jitter <= self.turnaround
            or self.client_cost < 0
        ):
            raise ValueError("invalid closed-loop trace parameters")
        self._rng = random.Random(f"closed:{self.seed}")

    def start(self) -> list[Arrival]:
        # All callers start within the first few milliseconds, in random order.
        starts = sorted((self._rng.uniform(0.0, 0.002), c) for c in range(self.clients))
        return [self._issue(c, at) for at, c in starts]

    def on_complete(self, request_id: str, now: float) -> list[Arrival]:
        caller = int(request_id[1:].split(".")[0])
        if self._sent[caller] >= self.per_client:
            return []
        handled = self._client_free = max(now, self._client_free) + self.client_cost
        delay = self.turnaround + self._rng.uniform(-self.jitter, self.jitter)
        return [self._issue(caller, handled + delay)]

    def _cost(self) -> int:
        if self.lengths == "mixed":
            return mixed_cost(self._rng, self.max_tokens)
        if self.lengths == "sentences":
            return sentence_cost(self._rng)
        return self.fixed_cost

    def _issue(self, caller: int, at: float) -> Arrival:
        # Ingress reads requests in the order they arrive: never before the last one.
        at = self._last = max(at, self._last)
        index = self._sent.get(caller, 0)
        self._sent[caller] = index + 1
        return Arrival(
            request_id=f"c{caller}.{index}",
            arrival=at,
            admission=self.ingress.admit(at),
            cost=self._cost(),
            scored=index >= self.warmup,
        )


@dataclass(slots=True)
class ReplayClient:
    """Open loop over a fixed list of arrivals (Poisson, hand-written tests)."""

    arrivals: list[Arrival]
    family: str = "replay"
    kind: Kind = "replay"

    def start(self) -> list[Arrival]:
        return sorted(self.arrivals, key=lambda a: a.arrival)

    def on_complete(self, request_id: str, now: float) -> list[Arrival]:
        return []


def sequential(n: int, think_time: float, ingress: float = DEFAULT_INGRESS, warmup: int = 0) -> SequentialClient:
    return SequentialClient(n=n, think_time=think_time, ingress=IngressQueue(ingress), warmup=warmup)


def bursts(
    size: int,
    count: int,
    jitter_max: float,
    idle_gap: float,
    seed: int,
    ingress: float = DEFAULT_INGRESS,
    warmup: int = 1,
) -> BurstClient:
    return BurstClient(
        size=size,
        count=count,
        jitter_max=jitter_max,
        idle_gap=idle_gap,
        seed=seed,
        ingress=IngressQueue(ingress),
        warmup=warmup,
    )


def closed_loop(
    clients: int,
    per_client: int,
    turnaround: float,
    seed: int,
    ingress: float = DEFAULT_INGRESS,
    jitter: float | None = None,
    lengths: Lengths = "mixed",
    client_cost: float = 0.0,
) -> ClosedLoopClient:
    return ClosedLoopClient(
        lengths=lengths,
        client_cost=client_cost,
        clients=clients,
        per_client=per_client,
        turnaround=turnaround,
        jitter=turnaround / 2 if jitter is None else jitter,
        seed=seed,
        ingress=IngressQueue(ingress),
    )


def poisson_times(rate: float, duration: float, seed: int) -> list[float]:
    if rate <= 0 or duration < 0:
        raise ValueError("poisson needs rate > 0 and duration >= 0")
    rng = random.Random(f"poisson:{seed}")
    times = []
    t = rng.expovariate(rate)
    while t < duration:
        times.append(t)
        t += rng.expovariate(rate)
    return times


def poisson(
    rate: float,
    duration: float,
    seed: int,
    ingress: float = DEFAULT_INGRESS,
    warmup: float = 0.0,
) -> ReplayClient:
    """Open-loop Poisson arrivals at ``rate`` requests/s for ``duration``
    seconds; those before ``warmup`` seconds are not scored."""
    queue = IngressQueue(ingress)
    return ReplayClient(
        arrivals=list(_replay(poisson_times(rate, duration, seed), queue, warmup)),
        family="poisson",
        kind="poisson",
    )


def _replay(times: Iterable[float], queue: IngressQueue, warmup: float) -> Iterable[Arrival]:
    for index, t in enumerate(times):
        yield Arrival(request_id=f"p{index}", arrival=t, admission=queue.admit(t), scored=t >= warmup)


def replay(times: Iterable[float], ingress: float = DEFAULT_INGRESS, family: str = "replay") -> ReplayClient:
    """Fixed header-arrival times through the ingress queue."""
    return ReplayClient(arrivals=list(_replay(times, IngressQueue(ingress), -math.inf)), family=family)


def open_loop(
    kind: ArrivalKind,
    rate: float,
    count: int,
    seed: int,
    *,
    ingress: float = DEFAULT_INGRESS,
    lengths: Lengths = "sentences",
    fixed_cost: int = DEFAULT_COST,
    warmup_share: float = 0.05,
) -> ReplayClient:
    """Independent users at ``rate`` requests/s (``sift_bench.workload.arrivals``:
    Poisson or bursty), about ``count`` requests, one text each of ``lengths``;
    the first ``warmup_share`` of the time is not scored."""
    duration = count / rate
    times = open_schedule(kind, rate, duration, seed)
    rng = random.Random(f"open-lengths:{seed}")
    queue = IngressQueue(ingress)
    arrivals = []
    for index, t in enumerate(times):
        if lengths == "sentences":
            cost = sentence_cost(rng)
        elif lengths == "mixed":
            cost = mixed_cost(rng)
        else:
            cost = fixed_cost
        arrivals.append(
            Arrival(
                request_id=f"o{index}",
                arrival=t,
                admission=queue.admit(t),
                cost=cost,
                scored=t >= warmup_share * duration,
            )
        )
    return ReplayClient(arrivals=arrivals, family="open", kind="open")


@dataclass(slots=True)
class ClosedThenOpenClient:
    """A closed loop that ends and is followed by independent users, as the bench's
    phases run: ``closed`` callers until each sent its ``per_client`` requests, then,
    ``gap`` seconds after the loop's last answer, an open loop at ``open_times``
    (seconds from its start), one text each of ``open_costs``. Only the open loop is
    scored: what its first requests wait is what the closed loop taught the engine."""

    closed: ClosedLoopClient
    open_times: list[float]
    open_costs: list[int]
    gap: float = 0.0
    family: str = "closed-then-open"
    kind: Kind = "open"
    _outstanding: int = field(default=0, init=False)
    _opened: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if len(self.open_times) != len(self.open_costs) or self.gap < 0:
            raise ValueError("invalid closed-then-open trace parameters")

    def start(self) -> list[Arrival]:
        arrivals = [replace(a, scored=False) for a in self.closed.start()]
        self._outstanding = len(arrivals)
        return arrivals

    def on_complete(self, request_id: str, now: float) -> list[Arrival]:
        if not request_id.startswith("c"):
            return []
        self._outstanding -= 1
        arrivals = [replace(a, scored=False) for a in self.closed.on_complete(request_id, now)]
        self._outstanding += len(arrivals)
        if self._outstanding or self._opened:
            return arrivals
        self._opened = True
        start = now + self.gap
        return [
            Arrival(
                request_id=f"o{index}",
                arrival=start + t,
                admission=self.closed.ingress.admit(start + t),
                cost=cost,
            )
            for index, (t, cost) in enumerate(zip(self.open_times, self.open_costs, strict=True))
        ]


def closed_then_open(
    clients: int,
    per_client: int,
    turnaround: float,
    kind: ArrivalKind,
    rate: float,
    duration: float,
    seed: int,
    *,
    gap: float = 0.0,
    ingress: float = DEFAULT_INGRESS,
    lengths: Lengths = "sentences",
) -> ClosedThenOpenClient:
    """``clients`` closed-loop callers (``closed_loop``), then ``gap`` seconds after
    their last answer independent users at ``rate`` requests/s for ``duration`` seconds."""
    closed = closed_loop(clients, per_client, turnaround, seed, ingress=ingress, lengths=lengths)
    times = open_schedule(kind, rate, duration, seed)
    rng = random.Random(f"then-open-lengths:{seed}")
    if lengths == "sentences":
        costs = [sentence_cost(rng) for _ in times]
    elif lengths == "mixed":
        costs = [mixed_cost(rng) for _ in times]
    else:
        costs = [closed.fixed_cost] * len(times)
    return ClosedThenOpenClient(closed=closed, open_times=times, open_costs=costs, gap=gap)
