"""Measure a loaded embedder's forward-time curve and derive its most efficient
batch size, so the engine can use batch size as a throughput knob.

On a CPU a forward of 8 short texts can run more items per second than a
forward of 32 (cache and padding effects), so under sustained load the
scheduler caps batches at the efficient size instead of "everything that
queued". Bursts after idle time are not affected: they still run as one forward.
The same points seed the scheduler's forward-cost line (its fixed part decides
whether holding for a returning wave pays).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sift_server.adapters.base import Adapter, EncodeTask, Part
from sift_server.engine.batch_queue import Caps

PROBE_TEXT = "A short sentence of about the length of a search query or a title."
SIZES = (1, 2, 4, 8, 16, 32)
NEAR_BEST = 0.95


@dataclass(frozen=True, slots=True)
class Curve:
    seconds: dict[int, float]
    tokens_per_item: int

    @property
    def items_per_second(self) -> dict[int, float]:
        return {n: n / s for n, s in self.seconds.items()}

    @property
    def points(self) -> list[tuple[int, float]]:
        """(tokens, seconds) of each measured forward."""
        return [(n * self.tokens_per_item, s) for n, s in self.seconds.items()]

    @property
    def best_size(self) -> int:
        """The largest batch that runs within ``NEAR_BEST`` of the best items/s: on a
        nearly flat curve (noise on a shared core, or a backend that is efficient
        from small batches on) a cap at the noisy maximum would only shrink batches."""
        rates = self.items_per_second
        best = max(rates.values())
        return max(n for n, rate in rates.items() if rate >= NEAR_BEST * best)


def measure(
    adapter: Adapter,
    sizes: Sequence[int] = SIZES,
    repeats: int = 3,
    clock: Callable[[], float] = time.perf_counter,
) -> Curve | None:
    """Fastest of ``repeats`` forwards per size (the minimum is robust to noise
    from other processes). None for adapters that do not encode.

    A curve that falls after its best size caps batches for the server's whole
    life, so the sizes from the best one up are measured once more before it is
    believed: one slow sample on a shared core would otherwise cap the model's
    forwards for good (docs/batching.md tells the case)."""
    if "encode" not in adapter.info.tasks:
        return None
    parts: dict[int, list[Part]] = {}
    tokens = 0
    for size in sizes:
        prepared = adapter.prepare(EncodeTask([PROBE_TEXT] * size))
        tokens = prepared.item_costs[0]
        parts[size] = [Part(prepared, 0, size)]
        adapter.forward(parts[size])  # first call at this shape is not timed
    seconds = {size: _fastest(adapter, parts[size], repeats, clock) for size in sizes}
    curve = Curve(seconds, tokens)
    if curve.best_size < max(sizes):
        for size in sizes:
            if size >= curve.best_size:
                seconds[size] = min(seconds[size], _fastest(adapter, parts[size], repeats, clock))
        curve = Curve(seconds, tokens)
    return curve


def _fastest(adapter: Adapter, parts: list[Part], repeats: int, clock: Callable[[], float]) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        adapter.forward(parts)
        best = min(best, clock() - start)
    return best


def load_caps(curve: Curve | None, caps: Caps) -> Caps | None:
    """Caps under sustained load: the efficient batch expressed in tokens (so
    longer texts make smaller batches). None when bigger is simply better."""
    if curve is None or curve.best_size >= max(curve.seconds):
        return None
    return Caps(max_requests=caps.max_requests, max_cost=min(caps.max_cost, curve.best_size * curve.tokens_per_item))
