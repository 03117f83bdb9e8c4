"""What a forward costs: ``seconds ≈ fixed + per_token * tokens``, learned online.

Pure code over the durations the shell measures. Holding an engine for a
returning wave pays only where a forward has a fixed part worth sharing (see
``engine.policy``): with halves of ``q`` queued and ``r`` returning requests
and a wait ``d``, one fused forward runs more requests per second than two
alternating ones exactly when ``fixed * r > d * q`` (the per-token part cancels
out). So the engine needs ``fixed``, and measures it.

A least-squares line through the recent forwards, with exponentially decaying
weights (``half_life`` forwards), so it follows a model whose speed changes
(another process on the core) but keeps the spread of sizes seen at idle time
(lone requests, bursts) long enough to tell the fixed part from the slope.
The registry may seed it with the forward curve it measured after load.
Without enough spread in sizes the fixed part is unknown (None), and nothing
that depends on it is done.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ForwardCost:
    half_life: float = 256.0
    # Cost spread (standard deviation in tokens) below which the line is not trusted.
    min_spread: float = 8.0
    _w: float = 0.0
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0

    def observe(self, tokens: int, seconds: float, weight: float = 1.0) -> None:
        decay = 0.5 ** (1.0 / self.half_life)
        self._w = self._w * decay + weight
        self._x = self._x * decay + weight * tokens
        self._y = self._y * decay + weight * seconds
        self._xx = self._xx * decay + weight * tokens * tokens
        self._xy = self._xy * decay + weight * tokens * seconds

    def _line(self) -> tuple[float, float] | None:
        if self._w <= 0:
            return None
        mean_x = self._x / self._w
        mean_y = self._y / self._w
        var_x = self._xx / self._w - mean_x * mean_x
        if var_x < self.min_spread**2:
            return None
        slope = (self._xy / self._w - mean_x * mean_y) / var_x
        return mean_y - slope * mean_x, slope

    @property
    def fixed(self) -> float | None:
        """Seconds of a forward that do not depend on its size (>= 0), or None
        while the forwards seen do not tell."""
        line = self._line()
        if line is None:
            return None
        return max(0.0, line[0])

    def seconds(self, tokens: int) -> float | None:
        line = self._line()
        if line is None:
            return None
        return max(0.0, line[0] + line[1] * tokens)

    @property
    def fixed_tokens(self) -> float | None:
        """The fixed part in tokens' worth of time (None while unknown, or where
        size does not cost time)."""
        line = self._line()
        if line is None or line[1] <= 0:
            return None
        return max(0.0, line[0]) / line[1]
