"""Clocks: the engine core never reads time itself; the shell injects one."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def __call__(self) -> float:
        """Seconds on a monotonic scale."""
        ...


def monotonic() -> float:
    return time.perf_counter()


class FakeClock:
    """A manually advanced clock for deterministic tests and the simulator."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now
