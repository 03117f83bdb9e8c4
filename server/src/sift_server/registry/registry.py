"""Loaded models: state, on-demand loading, least-recently-used eviction.

A model is ``available`` (in the catalog), ``loading``, ``loaded`` or
``failed``. A request for a cold model starts a background load and is told
to come back (503 MODEL_LOADING + Retry-After); a terminal failure is a 502.
"""

from __future__ import annotations

import asyncio
import difflib
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sift_server.adapters.base import Adapter
from sift_server.engine.ingress import IngressTicket
from sift_server.engine.model_engine import ModelEngine
from sift_server.errors import ModelLoadFailed, ModelLoading, ModelNotFound
from sift_server.registry.calibrate import Curve
from sift_server.registry.catalog import MAX_MODEL_NAME_CHARS, Catalog, ModelSpec
from sift_server.registry.loader import estimate_bytes, load_adapter
from sift_server.registry.loras import LoraSet
from sift_server.registry.switching import (
    Decisions,
    SwitchingAdapter,
    describe_switch,
    first_spec,
    in_low_priority_thread,
    pending,
    release_memory,
    serving_on,
)

log = logging.getLogger(__name__)

# Copies of a model auto's decision holds at once besides the serving one (the
# reference and the candidates it times in interleaved rounds).
DECIDING_COPIES = 4

# A model used (or loaded) this recently counts as serving and is not evicted
# for another: its clients may be waiting out a Retry-After before they return.
RECENT_USE_S = 2.0 * (ModelLoading.retry_after or 5)

# Longer names are no model's: they get a short 404 without a suggestion.
_MAX_NAME_CHARS = MAX_MODEL_NAME_CHARS

State = Literal["available", "loading", "loaded", "failed"]
EngineFactory = Callable[[ModelSpec, Adapter, "Curve | None"], ModelEngine]
AdapterLoader = Callable[[ModelSpec], Adapter]


@dataclass(slots=True)
class LoadError:
    error_class: str
    message: str
    attempts: int
    permanent: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.error_class,
            "message": self.message,
            "attempts": self.attempts,
            "permanent": self.permanent,
        }


@dataclass(slots=True)
class ModelRecord:
    spec: ModelSpec
    state: State = "available"
    adapter: Adapter | None = None
    engine: ModelEngine | None = None
    memory_bytes: int = 0
    # Measured size of the last load (kept across evictions, to plan a reload).
    known_bytes: int = 0
    last_used: float = 0.0
    load_seconds: float | None = None
    last_error: LoadError | None = None
    curve: Curve | None = None
    loras: LoraSet | None = None
    load_task: asyncio.Task[None] | None = field(default=None, repr=False)
    # auto's backend decision running in the background after a load on the reference.
    decide_task: asyncio.Task[None] | None = field(default=None, repr=False)


def _classify(exc: BaseException) -> tuple[str, bool]:
    """Load-error class and whether retrying could help."""
    name = type(exc).__name__
    if isinstance(exc, MemoryError):
        return "OOM", False
    if isinstance(exc, (ImportError, ModuleNotFoundError)):
        return "DEPENDENCY", True
    if "NotFound" in name or isinstance(exc, FileNotFoundError) or "offline" in str(exc).lower():
        return "NOT_FOUND", True
    if isinstance(exc, (ValueError, KeyError, TypeError)):
        return "CONFIG", True
    return "UNKNOWN", False


class Registry:
    def __init__(
        self,
        catalog: Catalog,
        engine_factory: EngineFactory,
        *,
        memory_budget_bytes: int,
        loader: AdapterLoader = load_adapter,
        clock: Callable[[], float] = time.monotonic,
        calibration: Callable[[ModelSpec, Adapter], Curve | None] | None = None,
        recent_use_s: float = RECENT_USE_S,
        decide_in_background: bool = True,
        backend_override: str | None = None,
        decisions: Decisions | None = None,
    ) -> None:
        # The forward curve of a loaded model (calibrate.CurveRecords.curve); None: no curve.
        self.calibration = calibration
        # The backend setting: every entry loads on it, so none decides in the background.
        self.backend_override = backend_override
        # auto entries serve on the reference at once and switch when the decision is made.
        self.decide_in_background = decide_in_background
        # Where auto's decisions are opened and made (None: in a thread of this
        # process, with ``loader``; ``deciding.ChildDecisions``: in a child process).
        self.decisions = decisions
        self.recent_use_s = recent_use_s
        self.catalog = catalog
        self._engine_factory = engine_factory
        self._loader = loader
        self._clock = clock
        self.memory_budget_bytes = memory_budget_bytes
        self.records = {name: ModelRecord(spec) for name, spec in catalog.specs.items()}
        self.evictions = 0

    # ---- lookup ----------------------------------------------------------

    def record(self, name: str) -> ModelRecord:
        record = self.records.get(name)
        if record is None:
            if len(name) > _MAX_NAME_CHARS:
                # No model has such a name: neither fuzzy-match it (difflib is
                # quadratic, seconds for megabytes) nor echo it whole.
                raise ModelNotFound(f"Model '{name[:_MAX_NAME_CHARS]}...' ({len(name)} characters) not found.")
            # Compared case-insensitively: a wrong case is the commonest slip.
            by_lower = {known.lower(): known for known in self.records}
            hint = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
            suffix = f" Did you mean '{by_lower[hint[0]]}'?" if hint else ""
            raise ModelNotFound(f"Model '{name}' not found.{suffix}")
        return record

    def begin_ingress(self, name: str, arrival: float | None = None) -> IngressTicket | None:
        """Count a request for model ``name`` whose headers arrived (at ``arrival``,
        default now) and that is not admitted yet; None where the model has no
        engine (unknown or not loaded: nothing is batching for it to learn from
        the count)."""
        record = self.records.get(name)
        if record is None or record.engine is None:
            return None
        return record.engine.ingress.begin(time.perf_counter() if arrival is None else arrival)

    def ready_engine(self, name: str) -> tuple[ModelRecord, ModelEngine]:
        """The model's engine if loaded; otherwise start loading and raise."""
        record = self.record(name)
        if record.state == "loaded" and record.engine is not None:
            record.last_used = self._clock()
            return record, record.engine
        if record.state == "failed" and record.last_error is not None and record.last_error.permanent:
            err = record.last_error
            raise ModelLoadFailed(
                f"Model '{name}' failed to load: {err.message}",
                error_class=err.error_class,
                attempts=err.attempts,
                permanent=err.permanent,
            )
        if record.load_task is None or record.load_task.done():
            busy = self._room_blockers(self._expected_bytes(record), keep=name)
            if busy:
                # Never evict a model that is serving for one that is loading: the
                # client comes back after Retry-After, when the others may be idle.
                raise ModelLoading(
                    f"Model '{name}' is waiting for memory: the budget is held by busy model(s) "
                    f"{', '.join(busy)}; retry shortly."
                )
        self.start_loading(name)
        raise ModelLoading(f"Model '{name}' is loading; retry shortly.")

    # ---- loading ---------------------------------------------------------

    def start_loading(self, name: str) -> asyncio.Task[None]:
        record = self.record(name)
        if record.load_task is None or record.load_task.done():
            record.state = "loading"
            record.load_task = asyncio.get_running_loop().create_task(self._load(record), name=f"load-{name}")
        return record.load_task

    async def load_now(self, name: str) -> ModelRecord:
        record = self.record(name)
        if record.state != "loaded":
            await self.start_loading(name)
        if record.state != "loaded":
            if record.last_error is None:
                # Not attempted: the budget is held by models that may not be evicted.
                raise ModelLoadFailed(f"Model '{name}' does not fit the memory budget next to the busy models.")
            raise ModelLoadFailed(f"Model '{name}' failed to load: {record.last_error.message}")
        return record

    async def _load(self, record: ModelRecord) -> None:
        spec = record.spec
        started = time.perf_counter()
        expected = self._expected_bytes(record)
        busy = self._room_blockers(expected, keep=spec.name)
        if busy:
            # They turned busy since the request that started this load.
            record.state = "available"
            log.info("model %s not loaded: the memory budget is held by busy model(s) %s", spec.name, busy)
            return
        await self._make_room(expected, keep=spec.name)
        first = first_spec(spec, self.backend_override) if self.decide_in_background else None
        try:
            recorded = None
            if first is not None and self.decisions is not None:
                # A decision on disk: open the chosen runtime alone (no PyTorch copy first).
                recorded = await asyncio.to_thread(self.decisions.recorded, spec)
            if recorded is not None:
                first = None
            background = first is not None
            adapter: Adapter = (
                recorded if recorded is not None else await asyncio.to_thread(self._loader, first or spec)
            )
        except Exception as exc:
            error_class, permanent_hint = _classify(exc)
            attempts = (record.last_error.attempts + 1) if record.last_error else 1
            # Transient-looking failures become permanent after repeated attempts.
            permanent = permanent_hint or attempts >= 3
            record.last_error = LoadError(error_class, f"{type(exc).__name__}: {exc}", attempts, permanent)
            record.state = "failed"
            log.error("loading model %s failed: %s", spec.name, exc)
            return
        if background:
            adapter = SwitchingAdapter(adapter, pending(adapter))
        record.adapter = adapter
        record.loras = LoraSet(spec, adapter, self._clock)
        record.memory_bytes = record.known_bytes = adapter.memory_bytes()
        if self.calibration is not None:
            record.curve = await asyncio.to_thread(self.calibration, spec, adapter)
        record.engine = self._engine_factory(spec, adapter, record.curve)
        record.engine.start()
        record.state = "loaded"
        record.last_error = None
        record.last_used = self._clock()
        record.load_seconds = time.perf_counter() - started
        # Weights live for the process: move them out of the collector's sight.
        gc.collect()
        gc.freeze()
        log.info("model %s loaded in %.2fs (%.0f MiB)", spec.name, record.load_seconds, record.memory_bytes / 2**20)
        if record.curve is not None:
            rates = ", ".join(f"{n}: {r:.0f}/s" for n, r in record.curve.items_per_second.items())
            log.info(
                "model %s forward curve (items/s by batch size) %s; efficient batch %d",
                spec.name,
                rates,
                record.curve.best_size,
            )
        if isinstance(adapter, SwitchingAdapter):
            log.info(
                "model %s serves on %s while auto decides its backend in the background", spec.name, serving_on(adapter)
            )
            record.decide_task = asyncio.get_running_loop().create_task(
                self._decide(record, adapter), name=f"decide-{spec.name}"
            )
        await self._make_room(0, keep=spec.name)

    async def _decide(self, record: ModelRecord, serving: SwitchingAdapter) -> None:
        """Load the entry as ``auto`` chooses (exports, timing rounds) in a child
        process (or, without ``decisions``, a thread at a raised nice), then switch
        ``serving`` to it between forwards and release what served first."""
        name = record.spec.name
        # While deciding, the budget counts the copies the decision holds next to the serving one.
        record.memory_bytes = serving.memory_bytes() * (1 + DECIDING_COPIES)
        try:
            if self.decisions is not None:
                decided = await self.decisions.decide(record.spec)
            else:
                decided = await in_low_priority_thread(self._loader, record.spec)
        except Exception as exc:
            if record.adapter is serving:
                record.memory_bytes = serving.memory_bytes()
            where = serving_on(serving)
            log.warning("model %s: the backend decision failed (%s); it stays on %s", name, exc, where)
            serving.settle(f"failed ({type(exc).__name__}: {str(exc)[:200]}); stays on {where}")
            return
        if record.adapter is not serving:
            decided.close()  # evicted (or reloaded) while deciding
            return
        old = await asyncio.to_thread(serving.switch, decided)
        old.close()
        record.memory_bytes = record.known_bytes = serving.memory_bytes()
        log.info("%s", describe_switch(name, old, decided))
        del old
        release_memory()

    # ---- eviction --------------------------------------------------------

    def model_states(self) -> list[tuple[str, bool, int]]:
        """(name, loaded, memory bytes) of every catalog model, for the metrics."""
        return [(r.spec.name, r.state == "loaded", r.memory_bytes) for r in self.records.values()]

    def loaded_bytes(self) -> int:
        return sum(r.memory_bytes for r in self.records.values() if r.state == "loaded")

    def is_busy(self, record: ModelRecord) -> bool:
        """Serving: a forward running, requests queued or being read, or a use
        within ``recent_use_s`` (its clients may be between retries)."""
        engine = record.engine
        if engine is None:
            return False
        if engine.has_work:
            return True
        return self._clock() - record.last_used < self.recent_use_s

    def _expected_bytes(self, record: ModelRecord) -> int:
        return max(estimate_bytes(record.spec), record.known_bytes)

    def _loading_bytes(self, keep: str) -> int:
        """What the other loads in progress will take."""
        return sum(
            self._expected_bytes(r) for r in self.records.values() if r.state == "loading" and r.spec.name != keep
        )

    def _evictable(self, keep: str) -> list[ModelRecord]:
        return [r for r in self.records.values() if r.state == "loaded" and r.spec.name != keep and not self.is_busy(r)]

    def _room_blockers(self, incoming: int, *, keep: str) -> list[str]:
        """Busy models that keep ``incoming`` bytes from fitting even after every
        idle model is evicted (empty when it fits)."""
        needed = self.loaded_bytes() + self._loading_bytes(keep) + incoming - self.memory_budget_bytes
        if needed <= 0 or sum(r.memory_bytes for r in self._evictable(keep)) >= needed:
            return []
        return sorted(
            r.spec.name
            for r in self.records.values()
            if r.spec.name != keep and (r.state == "loading" or (r.state == "loaded" and self.is_busy(r)))
        )

    async def _make_room(self, incoming: int, *, keep: str) -> None:
        """Evict idle models, least recently used first, until ``incoming`` fits
        the budget. Busy models are never evicted: a model whose size was unknown
        before its first load may leave the budget exceeded until they are idle."""
        while self.loaded_bytes() + incoming > self.memory_budget_bytes:
            victims = self._evictable(keep)
            if not victims:
                log.warning(
                    "memory budget exceeded (%.0f MiB loaded + %.0f MiB incoming > %.0f MiB): the others are busy",
                    self.loaded_bytes() / 2**20,
                    incoming / 2**20,
                    self.memory_budget_bytes / 2**20,
                )
                return
            await self.evict(min(victims, key=lambda r: r.last_used).spec.name)

    async def evict(self, name: str) -> None:
        record = self.record(name)
        engine, adapter = record.engine, record.adapter
        record.state, record.engine, record.adapter, record.memory_bytes = "available", None, None, 0
        record.loras = None
        self.evictions += 1
        # A decision still running finds the record changed and drops its result.
        if engine is not None:
            # Queued requests are told to come back; the model reloads on demand.
            await engine.close(0.0, ModelLoading(f"Model '{name}' was evicted; retry to reload it."))
            # A forward still running in its thread uses the weights: release them after it.
            await engine.forward_finished()
        if adapter is not None:
            adapter.close()
        del engine, adapter
        # Loads freeze the heap (gc.freeze), which hides the evicted model's
        # reference cycles from the collector for good: thaw, collect, refreeze.
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        log.info("evicted model %s", name)

    async def close(self, grace_s: float) -> None:
        # A decision still running is dropped (its child process is ended with it).
        deciding = [r.decide_task for r in self.records.values() if r.decide_task is not None]
        for task in deciding:
            task.cancel()
        await asyncio.gather(*deciding, return_exceptions=True)
        engines = [r.engine for r in self.records.values() if r.engine is not None]
        await asyncio.gather(*(w.close(grace_s) for w in engines))
