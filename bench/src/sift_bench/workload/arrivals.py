"""Open-loop arrival schedules: when independent users send their requests.

Real traffic is an open loop: users do not wait for each other's answers, so
the arrival times do not depend on the server. A schedule is a sorted list of
send times (seconds from the start of a phase), fixed by its kind, rate,
length and seed, so every arm of a bench run (and the simulator) sees the very
same arrivals.

* ``poisson``: independent arrivals at ``rate`` per second (exponential gaps);
* ``bursty``: the same mean rate in clusters: clusters start as a Poisson
  process at ``rate / mean_burst`` per second, each holds a geometric number
  of requests (mean ``mean_burst``, at least one), sent within ``spread``
  seconds of its start (a page that fires several queries at once, an agent's
  parallel tool calls). Clusters are independent of each other and of the
  server.
"""

from __future__ import annotations

import math
import random
from typing import Literal

ArrivalKind = Literal["poisson", "bursty"]
ARRIVAL_KINDS: tuple[ArrivalKind, ...] = ("poisson", "bursty")
MEAN_BURST = 4.0
BURST_SPREAD = 0.005


def poisson_times(rate: float, duration: float, rng: random.Random) -> list[float]:
    """Arrival times of a Poisson process at ``rate``/s over ``[0, duration)``."""
    times: list[float] = []
    t = rng.expovariate(rate)
    while t < duration:
        times.append(t)
        t += rng.expovariate(rate)
    return times


def geometric(mean: float, rng: random.Random) -> int:
    """A geometric count on 1, 2, ... with the given mean (>= 1)."""
    if mean <= 1.0:
        return 1
    p = 1.0 / mean
    # Inversion: P[N > k] = (1 - p)^k.
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


def bursty_times(
    rate: float, duration: float, rng: random.Random, mean_burst: float = MEAN_BURST, spread: float = BURST_SPREAD
) -> list[float]:
    """Clustered arrivals with mean ``rate``/s over ``[0, duration)`` (see the module doc)."""
    times: list[float] = []
    for start in poisson_times(rate / mean_burst, duration, rng):
        size = geometric(mean_burst, rng)
        times.extend(t for t in (start + rng.uniform(0.0, spread) for _ in range(size)) if t < duration)
    return sorted(times)


def open_schedule(
    kind: ArrivalKind,
    rate: float,
    duration: float,
    seed: int,
    *,
    mean_burst: float = MEAN_BURST,
    spread: float = BURST_SPREAD,
) -> list[float]:
    """The send times of one open-loop phase, the same for the same arguments."""
    if rate <= 0 or duration < 0 or not math.isfinite(rate):
        raise ValueError(f"an open loop needs a positive finite rate and a duration >= 0, got {rate}, {duration}")
    rng = random.Random(f"open:{kind}:{seed}")
    if kind == "poisson":
        return poisson_times(rate, duration, rng)
    if kind == "bursty":
        if mean_burst < 1 or spread < 0:
            raise ValueError("bursty arrivals need mean_burst >= 1 and spread >= 0")
        return bursty_times(rate, duration, rng, mean_burst, spread)
    raise ValueError(f"unknown arrival kind {kind!r}; choose one of {', '.join(ARRIVAL_KINDS)}")


def parse_loads(text: str) -> tuple[float, ...]:
    """Comma-separated loads, as fractions (0.8) or percentages (80%)."""
    loads: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        value = float(part[:-1]) / 100 if part.endswith("%") else float(part)
        if not 0 < value <= 2:
            raise ValueError(f"a load is a fraction of capacity in (0, 2], got {part!r}")
        loads.append(value)
    if not loads:
        raise ValueError("no load given")
    return tuple(loads)
