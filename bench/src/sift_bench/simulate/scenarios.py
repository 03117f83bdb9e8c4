"""The trace families a default simulation runs, per forward model."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sift_bench.simulate.forward_model import ForwardPreset, PaddedForward
from sift_bench.simulate.traces import (
    DEFAULT_INGRESS,
    Client,
    Kind,
    Lengths,
    bursts,
    closed_loop,
    closed_then_open,
    open_loop,
    poisson,
    sequential,
)
from sift_bench.workload.arrivals import ARRIVAL_KINDS, ArrivalKind
from sift_server.engine.batch_queue import Caps


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    kind: Kind
    make: Callable[[], Client]


@dataclass(frozen=True, slots=True)
class TraceConfig:
    seed: int = 0
    ingress: float = DEFAULT_INGRESS
    sequential_n: int = 200
    think_times: tuple[float, ...] = (0.001, 0.0002)
    burst_sizes: tuple[int, ...] = (8, 32)
    jitters: tuple[float, ...] = (0.0, 0.001, 0.002, 0.003)
    burst_count: int = 40
    burst_warmup: int = 1
    idle_gap: float = 0.050
    loads: tuple[float, ...] = (0.3, 0.6, 0.9)
    poisson_duration: float = 2.0
    poisson_warmup: float = 0.1
    # Closed loops of callers sending user-like mixed-length texts.
    closed_clients: tuple[int, ...] = (8, 32)
    closed_per_client: int = 60
    closed_turnaround: float = 0.002
    # A slow client (one core handling answers one by one, as an SDK in
    # Python does): its seconds per answer, for the closed loops on sentences.
    closed_client_cost: float = 0.0015
    # Open loops (independent users) at these shares of the closed-loop capacity
    # (``closed_capacity``: the engine's requests/s with ``open_capacity_clients``
    # callers on the same lengths), Poisson and bursty, about ``open_requests`` each.
    open_loads: tuple[float, ...] = (0.5, 0.65, 0.8, 0.9, 0.95)
    open_kinds: tuple[ArrivalKind, ...] = ARRIVAL_KINDS
    open_requests: int = 2000
    open_capacity_clients: int = 32
    # A closed loop of ``then_open_clients`` callers (``then_open_per_client`` requests each)
    # followed, ``then_open_pauses`` seconds after its last answer (0: at once; the bench
    # settles 0.5 s between phases), by Poisson users at ``then_open_loads`` of the closed-loop
    # capacity for ``then_open_seconds``: what the closed loop taught the engine must not hold them.
    then_open_clients: int = 32
    then_open_per_client: int = 20
    then_open_loads: tuple[float, ...] = (0.25, 0.5)
    then_open_pauses: tuple[float, ...] = (0.0, 0.5)
    then_open_seconds: float = 4.0


def family_seed(seed: int, name: str) -> int:
    """A stable per-family seed, so families do not share jitter sequences."""
    return zlib.crc32(f"{seed}:{name}".encode())


def system_capacity(forward: ForwardPreset, caps: Caps, ingress: float) -> float:
    """Requests/s the model sustains: the forward at the request cap, or the
    single ingress server if that is the slower of the two."""
    capacity = forward.capacity(caps.max_requests)
    return min(capacity, 1.0 / ingress) if ingress > 0 else capacity


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:g}ms"


def closed_capacity_family(config: TraceConfig, lengths: Lengths) -> Client:
    """The closed loop whose throughput is the capacity the open loops are scaled to."""
    return closed_loop(
        config.open_capacity_clients,
        config.closed_per_client,
        config.closed_turnaround,
        family_seed(config.seed, f"capacity-{lengths}"),
        ingress=config.ingress,
        lengths=lengths,
    )


def default_families(
    forward: ForwardPreset,
    caps: Caps,
    config: TraceConfig,
    closed_rate: Callable[[Lengths], float] | None = None,
) -> list[Family]:
    """The families of one forward model; ``closed_rate(lengths)``, the closed-loop
    requests/s the open loops are scaled to (None: no open loops)."""
    families: list[Family] = []

    def add(name: str, kind: Kind, make: Callable[[], Client]) -> None:
        def named() -> Client:
            client = make()
            client.family = name
            return client

        families.append(Family(name, kind, named))

    for think in config.think_times:
        add(
            f"seq-think{_ms(think)}",
            "sequential",
            partial(sequential, config.sequential_n, think, ingress=config.ingress),
        )
    for size in config.burst_sizes:
        for jitter in config.jitters:
            name = f"bursts{size}-jit{_ms(jitter)}"
            add(
                name,
                "bursts",
                partial(
                    bursts,
                    size,
                    config.burst_count + config.burst_warmup,
                    jitter,
                    config.idle_gap,
                    family_seed(config.seed, name),
                    ingress=config.ingress,
                    warmup=config.burst_warmup,
                ),
            )
    capacity = system_capacity(forward, caps, config.ingress)
    for load in config.loads:
        name = f"poisson-{round(load * 100)}%"
        add(
            name,
            "poisson",
            partial(
                poisson,
                load * capacity,
                config.poisson_duration,
                family_seed(config.seed, name),
                ingress=config.ingress,
                warmup=config.poisson_warmup,
            ),
        )
    # Varied lengths only where the forward model prices them (padding).
    lengths: tuple[Lengths, ...] = ("sentences", "mixed") if isinstance(forward, PaddedForward) else ("fixed",)
    variants: list[tuple[Lengths, float]] = [(text, 0.0) for text in lengths]
    if "sentences" in lengths and config.closed_client_cost > 0:
        variants.append(("sentences", config.closed_client_cost))
    for text, client_cost in variants:
        for clients in config.closed_clients:
            name = f"closed{clients}" if text == "fixed" else f"closed{clients}-{text}"
            if client_cost:
                name += "-slowclient"
            add(
                name,
                "closed",
                partial(
                    closed_loop,
                    clients,
                    config.closed_per_client,
                    config.closed_turnaround,
                    family_seed(config.seed, name),
                    ingress=config.ingress,
                    lengths=text,
                    client_cost=client_cost,
                ),
            )
    if closed_rate is not None and config.open_loads:
        open_text: Lengths = "sentences" if isinstance(forward, PaddedForward) else "fixed"
        suffix = "" if open_text == "fixed" else f"-{open_text}"
        for kind in config.open_kinds:
            for load in config.open_loads:
                name = f"open{round(load * 100)}-{kind}{suffix}"
                add(
                    name,
                    "open",
                    partial(
                        _open_family,
                        kind,
                        load,
                        partial(closed_rate, open_text),
                        config.open_requests,
                        family_seed(config.seed, name),
                        config.ingress,
                        open_text,
                    ),
                )
        for load in config.then_open_loads:
            for pause in config.then_open_pauses:
                name = f"closed{config.then_open_clients}-then"
                name += f"-pause{_ms(pause)}" if pause else ""
                name += f"-open{round(load * 100)}-poisson{suffix}"
                add(
                    name,
                    "open",
                    partial(
                        _closed_then_open_family,
                        config,
                        load,
                        pause,
                        partial(closed_rate, open_text),
                        family_seed(config.seed, name),
                        open_text,
                    ),
                )
    return families


def _closed_then_open_family(
    config: TraceConfig, load: float, pause: float, capacity: Callable[[], float], seed: int, lengths: Lengths
) -> Client:
    return closed_then_open(
        config.then_open_clients,
        config.then_open_per_client,
        config.closed_turnaround,
        "poisson",
        load * capacity(),
        config.then_open_seconds,
        seed,
        gap=pause,
        ingress=config.ingress,
        lengths=lengths,
    )


def _open_family(
    kind: ArrivalKind,
    load: float,
    capacity: Callable[[], float],
    count: int,
    seed: int,
    ingress: float,
    lengths: Lengths,
) -> Client:
    # The capacity is measured (a closed-loop run) only when an open family runs.
    return open_loop(kind, load * capacity(), count, seed, ingress=ingress, lengths=lengths)
