"""Loaded models: state, on-demand loading, and the shell of fair residency.

A model is ``available`` (in the catalog), ``loading``, ``loaded``, ``unloading``
or ``failed``. A request for a model that does not serve is told to come back
(503 + Retry-After): ``MODEL_LOADING`` while its load runs (or the memory it
needs is being released for it), ``RESOURCE_EXHAUSTED`` while it waits for memory
held by a model that is serving; a terminal failure is a 502. Which model holds
the memory budget, and when it gives way, is ``residency.Residency``'s decision.
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

from sift_server.adapters import load_peak
from sift_server.adapters.base import Adapter
from sift_server.engine.ingress import IngressTicket
from sift_server.engine.model_engine import ModelEngine
from sift_server.errors import ModelLoadFailed, ModelLoading, ModelNotFound, ResourceExhausted, SiftError
from sift_server.registry.calibrate import Curve
from sift_server.registry.catalog import MAX_MODEL_NAME_CHARS, Catalog, ModelSpec
from sift_server.registry.loader import estimate_bytes, load_adapter
from sift_server.registry.loras import LoraSet
from sift_server.registry.residency import Residency, ResidencyConfig, Wait
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

# Longer names are no model's: they get a short 404 without a suggestion.
_MAX_NAME_CHARS = MAX_MODEL_NAME_CHARS

State = Literal["available", "loading", "loaded", "unloading", "failed"]
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
    unload_task: asyncio.Task[None] | None = field(default=None, repr=False)
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
        residency: ResidencyConfig | None = None,
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
        self.catalog = catalog
        self._engine_factory = engine_factory
        self._loader = loader
        self._clock = clock
        self.memory_budget_bytes = memory_budget_bytes
        self.records = {name: ModelRecord(spec) for name, spec in catalog.specs.items()}
        self.residency = Residency(
            memory_budget_bytes,
            {name: self._expected_bytes(r) for name, r in self.records.items()},
            residency or ResidencyConfig(),
        )
        self.evictions = 0
        self._wake: asyncio.TimerHandle | None = None

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
        """The model's engine if loaded; otherwise ask for it (the residency plan may
        start its load, or unload another model for it) and raise what is happening."""
        record = self.record(name)
        if record.state == "loaded" and record.engine is not None:
            record.last_used = now = self._clock()
            self.residency.used(name, now)
            return record, record.engine
        if record.state == "failed" and record.last_error is not None and record.last_error.permanent:
            err = record.last_error
            raise ModelLoadFailed(
                f"Model '{name}' failed to load: {err.message}",
                error_class=err.error_class,
                attempts=err.attempts,
                permanent=err.permanent,
            )
        self.residency.want(name, self._clock())
        self.replan()
        raise self._refusal(name)

    def _refusal(self, name: str, *, promise: bool = True) -> SiftError:
        wait = self.residency.refuse(name, self._clock(), self._busy(), promise=promise)
        return refusal_error(wait)

    def _busy(self) -> frozenset[str]:
        """Models with a forward running or requests queued or being read."""
        return frozenset(n for n, r in self.records.items() if r.engine is not None and r.engine.has_work)

    # ---- the residency plan ----------------------------------------------

    def replan(self) -> None:
        """Ask the residency policy what to do now, and do it: unload models whose
        turn is over (or that have no clients) for a waiting one, start the loads
        that fit, and come back when the policy says."""
        now = self._clock()
        plan = self.residency.plan(now, self._busy())
        for name in plan.unload:
            self._start_unload(self.records[name], drain_s=self.residency.config.drain_grace_s)
        for name in plan.load:
            self._start_load(self.records[name])
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        if plan.wake_at is not None:
            self._wake = asyncio.get_running_loop().call_later(max(0.0, plan.wake_at - now), self.replan)

    # ---- loading ---------------------------------------------------------

    def _start_load(self, record: ModelRecord) -> None:
        if record.load_task is None or record.load_task.done():
            record.state = "loading"
            loop = asyncio.get_running_loop()
            record.load_task = loop.create_task(self._load(record), name=f"load-{record.spec.name}")

    async def load_now(self, name: str) -> ModelRecord:
        """Load the model and wait for it (preloads, workers' models). Models
        without clients give way to it; if the budget is held by models that have
        clients, it fails rather than wait for their turn."""
        record = self.record(name)
        tried = False
        while record.state != "loaded":
            if record.state == "loading" and record.load_task is not None:
                await record.load_task
                tried = True
                continue
            if record.state == "unloading" and record.unload_task is not None:
                await record.unload_task
                continue
            if tried:
                message = record.last_error.message if record.last_error else "not loaded"
                raise ModelLoadFailed(f"Model '{name}' failed to load: {message}")
            self.residency.want(name, self._clock())
            self.replan()
            if record.state == "loading":
                continue
            releasing = [r.unload_task for r in self.records.values() if r.state == "unloading" and r.unload_task]
            if releasing and self.residency.refuse(name, self._clock(), self._busy(), promise=False).kind == "loading":
                await asyncio.gather(*releasing)
                continue
            self.residency.withdraw(name)
            raise ModelLoadFailed(f"Model '{name}' does not fit the memory budget next to the busy models.")
        # Measured larger than expected, it may have pushed others out: return within the budget.
        await asyncio.gather(*(r.unload_task for r in self.records.values() if r.unload_task is not None))
        return record

    async def _load(self, record: ModelRecord) -> None:
        spec = record.spec
        started = self._clock()
        first = first_spec(spec, self.backend_override) if self.decide_in_background else None
        try:
            recorded = None
            if first is not None and self.decisions is not None:
                # A decision on disk: open the chosen runtime alone (no PyTorch copy first).
                recorded = await asyncio.to_thread(self.decisions.recorded, spec)
            if recorded is not None:
                first = None
            background = first is not None
            if recorded is not None:
                adapter: Adapter = recorded
            else:
                loop = asyncio.get_running_loop()

                def peak(size: int) -> None:  # called from the loading thread: returns once room is made
                    asyncio.run_coroutine_threadsafe(self._make_room(record, size), loop).result()

                with load_peak.listening(peak):
                    adapter = await asyncio.to_thread(self._loader, first or spec)
        except Exception as exc:
            error_class, permanent_hint = _classify(exc)
            attempts = (record.last_error.attempts + 1) if record.last_error else 1
            # Transient-looking failures become permanent after repeated attempts.
            permanent = permanent_hint or attempts >= 3
            record.last_error = LoadError(error_class, f"{type(exc).__name__}: {exc}", attempts, permanent)
            record.state = "failed"
            log.error("loading model %s failed: %s", spec.name, exc)
            self.residency.set_bytes(spec.name, self._expected_bytes(record))  # a reported peak ends with the load
            self.residency.load_failed(spec.name)
            self.replan()
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
        record.load_seconds = record.last_used - started
        self.residency.loaded(spec.name, record.last_used, record.load_seconds, record.memory_bytes)
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
        # Its size is measured now: a model larger than expected may push others out.
        self.replan()

    async def _make_room(self, record: ModelRecord, size: int) -> None:
        """Count a load's coming peak, and wait for the models it pushes out to be released:
        the load goes on (its peak arrives) only then."""
        self._load_peak(record, size)
        releasing = [r.unload_task for r in self.records.values() if r.unload_task is not None]
        await asyncio.gather(*(task for task in releasing if not task.done()))

    def _load_peak(self, record: ModelRecord, size: int) -> None:
        """The load in progress holds about ``size`` bytes for a while (adapters/load_peak.py:
        a conversion's peak): the budget counts them until the load ends (then the
        loaded model's measured size, or on failure its expected size)."""
        name = record.spec.name
        if record.state != "loading" or size <= self.residency.models[name].bytes:
            return
        log.info("model %s: its load holds about %.0f MiB for a while; the budget counts them", name, size / 2**20)
        self.residency.set_bytes(name, size)
        self.replan()

    async def _decide(self, record: ModelRecord, serving: SwitchingAdapter) -> None:
        """Load the entry as ``auto`` chooses (exports, timing rounds) in a child
        process (or, without ``decisions``, a thread at a raised nice), then switch
        ``serving`` to it between forwards and release what served first."""
        name = record.spec.name
        # While deciding, the budget counts the copies the decision holds next to the serving one.
        self._set_memory(record, serving.memory_bytes() * (1 + DECIDING_COPIES))
        try:
            if self.decisions is not None:
                decided = await self.decisions.decide(record.spec)
            else:
                decided = await in_low_priority_thread(self._loader, record.spec)
        except Exception as exc:
            if record.adapter is serving:
                self._set_memory(record, serving.memory_bytes())
            where = serving_on(serving)
            log.warning("model %s: the backend decision failed (%s); it stays on %s", name, exc, where)
            serving.settle(f"failed ({type(exc).__name__}: {str(exc)[:200]}); stays on {where}")
            return
        if record.adapter is not serving:
            decided.close()  # evicted (or reloaded) while deciding
            return
        old = await asyncio.to_thread(serving.switch, decided)
        old.close()
        record.known_bytes = serving.memory_bytes()
        self._set_memory(record, record.known_bytes)
        log.info("%s", describe_switch(name, old, decided))
        del old
        release_memory()

    # ---- eviction --------------------------------------------------------

    def model_states(self) -> list[tuple[str, bool, int]]:
        """(name, loaded, memory bytes) of every catalog model, for the metrics."""
        return [(r.spec.name, r.state == "loaded", r.memory_bytes) for r in self.records.values()]

    def loaded_bytes(self) -> int:
        return sum(r.memory_bytes for r in self.records.values() if r.state == "loaded")

    def _set_memory(self, record: ModelRecord, size: int) -> None:
        record.memory_bytes = size
        if record.state == "loaded":
            self.residency.set_bytes(record.spec.name, size)

    def _expected_bytes(self, record: ModelRecord) -> int:
        return max(estimate_bytes(record.spec), record.known_bytes)

    def _start_unload(self, record: ModelRecord, *, drain_s: float, error: SiftError | None = None) -> None:
        record.state = "unloading"
        record.unload_task = asyncio.get_running_loop().create_task(
            self._unload(record, drain_s, error), name=f"unload-{record.spec.name}"
        )

    async def evict(self, name: str) -> None:
        """Unload the model now: requests still queued are told to retry, a running
        forward finishes first."""
        record = self.record(name)
        if record.state == "loaded":
            self.residency.begin_unload(name)
            evicted = ModelLoading(f"Model '{name}' was evicted; retry to reload it.")
            self._start_unload(record, drain_s=0.0, error=evicted)
        if record.unload_task is not None:
            await record.unload_task

    async def _unload(self, record: ModelRecord, drain_s: float, error: SiftError | None) -> None:
        """Admit nothing new; let queued and running forwards finish within
        ``drain_s`` (what is left gets the model's wait, or ``error``); then release."""
        name = record.spec.name
        engine, adapter = record.engine, record.adapter
        if engine is not None:
            leftover = error or self._refusal(name, promise=False)
            await engine.close(drain_s, leftover)
            # A forward still running in its thread uses the weights: release them after it.
            await engine.forward_finished()
        record.state, record.engine, record.adapter, record.memory_bytes = "available", None, None, 0
        record.loras = None
        self.evictions += 1
        # A decision still running finds the record changed and drops its result.
        if adapter is not None:
            adapter.close()
        del engine, adapter
        # Loads freeze the heap (gc.freeze), which hides the evicted model's
        # reference cycles from the collector for good: thaw, collect, refreeze.
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.residency.set_bytes(name, self._expected_bytes(record))
        self.residency.released(name)
        log.info("evicted model %s", name)
        self.replan()

    async def close(self, grace_s: float) -> None:
        if self._wake is not None:
            self._wake.cancel()
        # A decision still running is dropped (its child process is ended with it).
        deciding = [r.decide_task for r in self.records.values() if r.decide_task is not None]
        for task in deciding:
            task.cancel()
        await asyncio.gather(*deciding, return_exceptions=True)
        engines = [r.engine for r in self.records.values() if r.engine is not None]
        await asyncio.gather(*(w.close(grace_s) for w in engines))


def refusal_error(wait: Wait) -> SiftError:
    """The contract's 503 for a client of a model that does not serve yet."""
    error: SiftError = ModelLoading(wait.message) if wait.kind == "loading" else ResourceExhausted(wait.message)
    error.retry_after = wait.retry_after_s
    return error
