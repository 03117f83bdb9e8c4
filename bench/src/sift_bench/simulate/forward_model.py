"""Forward-time models: how long one forward of ``n`` items takes."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class LinearForward:
    """``F(n) = a + b*n`` seconds for a forward of ``n`` items (``n >= 1``)."""

    a: float
    b: float
    name: str = "linear"

    def __post_init__(self) -> None:
        if self.a < 0 or self.b < 0 or self.a + self.b <= 0:
            raise ValueError(f"forward model needs a >= 0, b >= 0 and F(1) > 0, got a={self.a} b={self.b}")

    def __call__(self, n: int) -> float:
        if n < 1:
            raise ValueError("a forward runs at least one item")
        return self.a + self.b * n

    def capacity(self, max_batch: int) -> float:
        """Items per second when every forward runs ``max_batch`` items."""
        return max_batch / self(max_batch)

    def describe(self) -> str:
        return f"{self.name}: F(n) = {self.a * 1e3:.3g} ms + {self.b * 1e3:.3g} ms * n"


@dataclass(frozen=True, slots=True)
class PaddedForward:
    """A text model on a CPU: ``F = a + per_token * slots``, where ``slots =
    items * width`` and the width is the batch's longest item (every row is
    padded to it), so mixing one long text into a batch of short ones costs
    what the padding costs. Past ``efficient_tokens`` slots each one costs
    ``spill`` more per doubling (caches overflow), which is why the server caps batches there under
    sustained load (what its calibration finds); None: no such effect."""

    a: float
    per_token: float
    name: str = "padded"
    # For Poisson loads and capacities: the cost of a typical item.
    typical_tokens: int = 32
    efficient_tokens: int | None = None
    spill: float = 0.12
    # Tokens every row carries besides its text (an extractor's labels).
    row_extra: int = 0
    # The server's event loop shares the forward's core (``SharedLoop``): its
    # seconds to read one request and to write one answer; 0, 0: a core of its own.
    loop_read: float = 0.0
    loop_write: float = 0.0

    def batch_seconds(self, costs: Sequence[int]) -> float:
        if not costs:
            raise ValueError("a forward runs at least one item")
        slots = len(costs) * (max(costs) + self.row_extra)
        factor = 1.0
        if self.efficient_tokens and slots > self.efficient_tokens:
            factor += self.spill * math.log2(slots / self.efficient_tokens)
        return self.a + self.per_token * slots * factor

    def __call__(self, n: int) -> float:
        return self.batch_seconds([self.typical_tokens] * n)

    def capacity(self, max_batch: int) -> float:
        return max_batch / self(max_batch)

    def describe(self) -> str:
        return f"{self.name}: F = {self.a * 1e3:.3g} ms + {self.per_token * 1e3:.3g} ms * items * longest item (tokens)"


GPU_LIKE = LinearForward(a=0.008, b=0.00015, name="gpu")
CPU_LIKE = LinearForward(a=0.0006, b=0.0009, name="cpu")
# all-MiniLM-L6-v2 on one CPU core, fitted to its calibration curve (docs/batching.md).
CPU_TEXT = PaddedForward(a=0.016, per_token=0.00044, name="cpu-text", efficient_tokens=256)
# The bench's MiniLM-sized GLiClass head (six labels, about 20 tokens on every
# row) on one core shared with the server's loop, as the bench runs it: forwards
# of 22 ms for one sentence, about 110 ms for 8 and 430 ms for 32 (docs/batching.md).
CPU_GLICLASS = PaddedForward(
    a=0.013, per_token=0.000176, name="cpu-gliclass", row_extra=20, loop_read=0.0003, loop_write=0.0001
)
ForwardPreset = LinearForward | PaddedForward
PRESETS: dict[str, ForwardPreset] = {
    "gpu": GPU_LIKE,
    "cpu": CPU_LIKE,
    "cpu-text": CPU_TEXT,
    "cpu-gliclass": CPU_GLICLASS,
}


def fit_linear(points: Mapping[int, float], name: str = "fitted") -> LinearForward:
    """Least-squares ``a + b*n`` through measured (batch size -> seconds) points.

    Constrained to ``a >= 0`` and ``b >= 0`` (noisy flat GPU timings can give a
    slightly negative slope, which would make no physical sense): when the free
    fit leaves that region, the best fit on its boundary is returned.
    """
    if any(n < 1 for n in points):
        raise ValueError("batch sizes must be >= 1")
    if any(t <= 0 for t in points.values()):
        raise ValueError("forward times must be positive")
    if len(points) < 2:
        raise ValueError("need at least two distinct batch sizes to fit a + b*n")
    ns = [float(n) for n in points]
    ts = [float(points[n]) for n in points]
    count = len(ns)
    mean_n = sum(ns) / count
    mean_t = sum(ts) / count
    sxx = sum((n - mean_n) ** 2 for n in ns)
    sxy = sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, ts, strict=True))
    b = sxy / sxx
    a = mean_t - b * mean_n
    if b < 0:
        a, b = mean_t, 0.0
    elif a < 0:
        a, b = 0.0, sum(n * t for n, t in zip(ns, ts, strict=True)) / sum(n * n for n in ns)
    return LinearForward(a=a, b=b, name=name)


def load_points(path: Path) -> dict[int, float]:
    """Read ``{"batch_seconds": {"1": 0.0031, "8": ...}}``; a list of samples
    for one size is reduced to its median."""
    data = json.loads(path.read_text(encoding="utf-8"))
    raw = data.get("batch_seconds") if isinstance(data, dict) else None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: expected an object with a non-empty 'batch_seconds' mapping")
    points: dict[int, float] = {}
    for key, value in raw.items():
        seconds = statistics.median(value) if isinstance(value, list) else value
        points[int(key)] = float(seconds)
    return points


def load_fitted(path: Path, name: str = "fitted") -> LinearForward:
    return fit_linear(load_points(path), name=name)
