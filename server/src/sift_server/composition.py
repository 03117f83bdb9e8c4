"""The composition root: settings in, the serving state out (policy, scheduler
configuration, one batching engine per loaded model, registry, limits, metrics).

``sift serve``, ``sift worker`` and ``sift gateway`` all start from here; nothing
of HTTP or NATS is wired in this module.
"""

from __future__ import annotations

import os
from functools import partial

from sift_server.adapters.base import Adapter
from sift_server.config import Settings
from sift_server.core.state import ServerState
from sift_server.engine.batch_queue import Caps
from sift_server.engine.model_engine import SERVING_FORWARD_NICE, EngineConfig, ModelEngine
from sift_server.engine.policy import make_policy
from sift_server.engine.scheduler import SchedulerConfig
from sift_server.engine.trace import JsonlTrace, TraceSink
from sift_server.metrics import Metrics
from sift_server.registry.calibrate import Curve, CurveRecords, load_caps
from sift_server.registry.catalog import Catalog, CatalogError, ModelSpec
from sift_server.registry.deciding import ChildDecisions
from sift_server.registry.loader import load_adapter
from sift_server.registry.registry import AdapterLoader, Registry
from sift_server.registry.residency import ResidencyConfig
from sift_server.service.common import Limits
from sift_server.service.images import ImageLimits
from sift_server.service.prep import PrepThread
from sift_server.telemetry import tracing
from sift_server.telemetry.forwards import forward_spans


def build_state(
    settings: Settings, *, loader: AdapterLoader | None = None, catalog: Catalog | None = None
) -> ServerState:
    catalog = catalog or Catalog.from_dirs(settings.catalog)
    for name in [settings.default_model, *settings.preload]:
        if name not in catalog:
            raise CatalogError(f"model {name!r} is not in the catalog; known: {', '.join(catalog.names())}")
    metrics = Metrics(frozenset(catalog.listed()))
    trace: TraceSink | None = JsonlTrace(settings.trace_file) if settings.trace_file else None
    # The operator bounds the batching; the batching model's constants are the engine's own.
    policy = make_policy(settings.policy, max_hold_ms=settings.max_hold_ms, max_wait_ms=settings.max_batch_wait_ms)

    def engine_factory(spec: ModelSpec, adapter: Adapter, curve: Curve | None) -> ModelEngine:
        batching = spec.batching
        caps = Caps(
            max_requests=batching.max_batch_requests or settings.max_batch_requests,
            max_cost=batching.max_batch_cost or settings.max_batch_cost,
        )
        scheduling = SchedulerConfig(
            caps=caps,
            load_caps=load_caps(curve, caps),
            max_queue_items=batching.max_queue_items or settings.max_queue_items,
            queue_timeout=settings.queue_timeout_s,
            shared_core=len(os.sched_getaffinity(0)) <= 1 if hasattr(os, "sched_getaffinity") else False,
            open_loop_rules=settings.open_loop_rules,
        )
        config = EngineConfig(scheduler=scheduling, forward_nice=SERVING_FORWARD_NICE)
        spans = forward_spans(lambda: str(adapter.info.runtime.get("backend", "torch")))
        engine = ModelEngine(
            spec.name, adapter.forward, policy, config, trace=trace, observers=[metrics.observe_forward, spans]
        )
        if curve is not None:
            engine.scheduler.seed_costs(curve.points)
        return engine

    registry = Registry(
        catalog,
        engine_factory,
        memory_budget_bytes=settings.memory_budget_mb * 2**20,
        loader=loader
        or partial(
            load_adapter,
            torch_threads=settings.torch_threads,
            backend_override=settings.backend,
            rechoose_backend=settings.rechoose_backend,
            cache_dir=settings.cache_dir,
        ),
        calibration=CurveRecords(settings.cache_dir, settings.rechoose_backend).curve if settings.calibrate else None,
        residency=ResidencyConfig(
            linger_s=settings.evict_idle_s, payback=settings.swap_payback, min_turn_s=settings.min_turn_s
        ),
        backend_override=settings.backend,
        # A loader given (tests) decides in a thread with it; the real one, in a child process.
        decisions=None
        if loader is not None
        else ChildDecisions(
            torch_threads=settings.torch_threads,
            backend_override=settings.backend,
            rechoose_backend=settings.rechoose_backend,
            cache_dir=settings.cache_dir,
            calibrate=settings.calibrate,
        ),
    )
    metrics.watch_models(registry.model_states)
    tracing.start(settings.otlp_endpoint)
    limits = limits_of(settings)
    return ServerState(settings=settings, registry=registry, limits=limits, metrics=metrics, prep=PrepThread())


def limits_of(settings: Settings) -> Limits:
    """What one request may carry."""
    images = ImageLimits(
        per_item=settings.max_images_per_item,
        per_request=settings.max_images_per_request,
        max_bytes=settings.max_image_bytes,
        max_pixels=settings.max_image_pixels,
    )
    return Limits(max_item_bytes=settings.max_item_bytes, max_items=settings.max_request_items, images=images)
