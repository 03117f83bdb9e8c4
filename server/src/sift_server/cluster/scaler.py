"""How many workers ``sift cluster`` should run, from the backlog an autoscaler
reads in production (pending + in-flight messages of the workers' models'
consumers: cluster.backlog, KEDA's nats-jetstream scaler): pure, over explicit
state and the time passed in.

The same rules as the KEDA ScaledObjects of deploy/, so that the signal is
exercised on one machine:

* up at once when there is backlog: ceil(backlog / backlog_per_worker) workers
  (at least one, so a pool at zero wakes on one waiting request), at most
  ``max_workers``; never down while there is backlog (a worker taken away
  mid-burst would hand its messages back to be run again);
* down to ``min_workers`` once the backlog has been zero for ``idle_s`` (a
  model load is not free: no flapping on a short lull).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScalePolicy:
    min_workers: int = 0
    max_workers: int = 4
    # Backlog one worker is expected to absorb (KEDA's lagThreshold: 32 in deploy/).
    backlog_per_worker: int = 32
    # Backlog-free time before the pool goes back to its minimum (KEDA's cooldownPeriod).
    idle_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_workers <= self.max_workers or self.max_workers < 1:
            raise ValueError(f"need 0 <= min ({self.min_workers}) <= max ({self.max_workers}) and max >= 1")
        if self.backlog_per_worker < 1 or self.idle_s < 0:
            raise ValueError("backlog_per_worker must be >= 1 and idle_s >= 0")


@dataclass(frozen=True, slots=True)
class ScaleState:
    """What the policy remembers: when the backlog was last seen non-zero (at first:
    when the scaler started, so a pool is not cut the moment it starts)."""

    last_busy: float


def wanted_workers(
    policy: ScalePolicy, state: ScaleState, running: int, backlog: int, now: float
) -> tuple[int, ScaleState]:
    """The number of workers to run now (``running``: started, including those still
    loading) and the state to pass next time."""
    if backlog > 0:
        needed = max(1, math.ceil(backlog / policy.backlog_per_worker))
        return min(policy.max_workers, max(running, needed, policy.min_workers)), ScaleState(last_busy=now)
    floor = max(policy.min_workers, min(running, policy.max_workers))
    if running > policy.min_workers and now - state.last_busy >= policy.idle_s:
        return policy.min_workers, state
    return floor, state
