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

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sift_server.adapters.base import Adapter, EncodeTask, Part
from sift_server.engine.batch_queue import Caps

if TYPE_CHECKING:
    from sift_server.registry.catalog import ModelSpec

log = logging.getLogger(__name__)

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


# A recorded curve is believed only while one size, timed again at load, is within this
# factor of it either way: a curve recorded on a busy core (too slow) would otherwise cap the
# model's batches on every later start, and one recorded faster than this start can run is
# as wrong.
CHECK_SIZE = 8
CHECK_FACTOR = 1.25


def agrees(curve: Curve, adapter: Adapter, clock: Callable[[], float] = time.perf_counter) -> bool:
    """Whether ``adapter``'s forward of ``CHECK_SIZE`` probe texts, fastest of three, takes
    what ``curve`` says within ``CHECK_FACTOR``."""
    recorded = curve.seconds.get(CHECK_SIZE)
    if recorded is None or recorded <= 0:
        return False
    prepared = adapter.prepare(EncodeTask([PROBE_TEXT] * CHECK_SIZE))
    parts = [Part(prepared, 0, CHECK_SIZE)]
    adapter.forward(parts)  # first call at this shape is not timed
    now = _fastest(adapter, parts, 3, clock)
    return recorded / CHECK_FACTOR <= now <= recorded * CHECK_FACTOR


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


# A recorded curve is the measure of one catalog entry on one runtime, machine and set of
# library versions; the figures of the runtime description that vary from start to start
# (how it was chosen, when, its probe timings) are not part of what was measured.
_UNMEASURED = frozenset({"selected_by", "measured", "timing", "decided_at", "call_cost_tokens"})
CURVE_FORMAT = 1


def curve_key(spec: ModelSpec, runtime: Mapping[str, Any]) -> str:
    from sift_server.adapters.backends import artifacts
    from sift_server.adapters.backends.report import cpu_signature

    return artifacts.artifact_key(
        {
            "curve": CURVE_FORMAT,
            "entry": spec.model_dump(mode="json", exclude={"file", "description"}),
            "runtime": {k: v for k, v in sorted(runtime.items()) if k not in _UNMEASURED},
            "cpu": cpu_signature(),
            "versions": artifacts.library_versions(),
            "probe": [PROBE_TEXT, list(SIZES)],
        }
    )


def _as_curve(data: object) -> Curve | None:
    if not isinstance(data, dict):
        return None
    seconds, tokens = data.get("seconds"), data.get("tokens_per_item")
    if not isinstance(seconds, dict) or not isinstance(tokens, int) or not seconds:
        return None
    try:
        return Curve({int(n): float(t) for n, t in seconds.items()}, tokens)
    except (TypeError, ValueError):
        return None


@dataclass(slots=True)
class CurveRecords:
    """Curves measured once and kept in the artifact cache (``curves/<key>.json``), so a
    later start of the same entry on the same runtime and machine skips the timing
    forwards (2–3 s of a start). ``remeasure`` (``SIFT_RECHOOSE_BACKEND``, which decides
    the backend again) measures anew and replaces the record."""

    cache_dir: Path | None = None
    remeasure: bool = False

    def _path(self, spec: ModelSpec, adapter: Adapter) -> Path:
        from sift_server.adapters.backends import artifacts

        return artifacts.usable_cache_dir(self.cache_dir) / "curves" / f"{curve_key(spec, adapter.info.runtime)}.json"

    def recorded(self, spec: ModelSpec, adapter: Adapter) -> Curve | None:
        return self._read(self._path(spec, adapter))

    def record(self, spec: ModelSpec, adapter: Adapter, curve: Curve) -> None:
        self._write(self._path(spec, adapter), spec, curve)

    @staticmethod
    def _read(path: Path) -> Curve | None:
        try:
            return _as_curve(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    @staticmethod
    def _write(path: Path, spec: ModelSpec, curve: Curve) -> None:
        from sift_server.adapters.backends import artifacts

        text = json.dumps(
            {"seconds": {str(n): t for n, t in curve.seconds.items()}, "tokens_per_item": curve.tokens_per_item}
        )
        try:
            artifacts.write_atomic(path, text)
        except OSError as exc:  # a full or read-only cache: this start measured, the next one will too
            log.warning("could not record the forward curve of %s in %s: %s", spec.name, path.parent, exc)

    def curve(self, spec: ModelSpec, adapter: Adapter) -> Curve | None:
        """The recorded curve of ``spec`` on ``adapter``'s runtime, else one measured now
        (and recorded). None for adapters that do not encode."""
        if "encode" not in adapter.info.tasks:
            return None
        # One key (library versions, CPU signature) and one cache probe per load.
        path = self._path(spec, adapter)
        if not self.remeasure:
            found = self._read(path)
            if found is not None and agrees(found, adapter):
                log.info("model %s: forward curve recorded earlier (SIFT_RECHOOSE_BACKEND=1 measures again)", spec.name)
                return found
            if found is not None:
                log.info(
                    "model %s: the recorded forward curve disagrees with a check forward; measuring again", spec.name
                )
        measured = measure(adapter)
        if measured is not None:
            self._write(path, spec, measured)
        return measured
