"""One core shared by the server's event loop and its forward.

A server pinned to one CPU reads each request (headers, body, decoding,
tokenizing) and writes each answer on its event loop, one after the other, on
the core the forward runs on; the loop runs first (the forward thread has a
lower priority). So the requests of a returning wave reach the scheduler one
by one, spread over a span proportional to how many are read, and a forward
that runs meanwhile finishes later by the loop's work. ``SharedLoop`` keeps
the loop's work as a single FIFO of busy intervals; the simulator asks it
when a request is read, when an answer leaves, and when a forward that
started at ``t`` has had ``w`` seconds of the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class SharedLoop:
    # Loop seconds to read one request (headers arrive when it starts, admission when it ends).
    read: float
    # Loop seconds to write one answer.
    write: float
    free_at: float = -math.inf
    # Reserved work, sorted and disjoint (each reservation starts where the last ended or later).
    busy: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.read < 0 or self.write < 0:
            raise ValueError("loop costs must be >= 0")

    def reserve(self, at: float, seconds: float) -> tuple[float, float]:
        """Loop work of ``seconds`` ready at ``at``: when it starts and ends."""
        start = max(at, self.free_at)
        end = start + seconds
        self.free_at = end
        if seconds > 0:
            self.busy.append((start, end))
        return start, end

    def finish(self, start: float, work: float) -> float:
        """When a forward that started at ``start`` has had ``work`` seconds of
        the core, the loop's work (reserved so far) running first."""
        t, remaining = start, work
        for begin, end in self.busy:
            if end <= t:
                continue
            if begin >= t + remaining:
                break
            remaining -= max(0.0, begin - t)
            t = end
        return t + remaining

    def forget(self, before: float) -> None:
        """Drop work that ended before ``before`` (no forward asks about it again)."""
        keep = next((i for i, (_, end) in enumerate(self.busy) if end > before), len(self.busy))
        if keep:
            del self.busy[:keep]
