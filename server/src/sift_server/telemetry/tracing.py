"""The process's tracer: configured once at start, None when tracing is off."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

SERVICE_NAME = "sift"
# OpenTelemetry's own variable (Sift's, SIFT_OTLP_ENDPOINT, is the otlp_endpoint setting).
OTEL_ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"


def endpoint_from_env() -> str | None:
    """OpenTelemetry's standard variable, honoured as OpenTelemetry's own tools do."""
    return os.environ.get(OTEL_ENDPOINT_VARIABLE, "").strip() or None


def traces_url(endpoint: str) -> str:
    """OTLP/HTTP sends traces to ``<endpoint>/v1/traces`` (a full URL is kept)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


@dataclass(slots=True)
class Tracing:
    """A tracer provider of its own (not OpenTelemetry's process-global one, which
    can be set only once) and the request spans still open, by request id, so a
    forward can link to the requests it carried."""

    provider: Any
    tracer: Any
    open_requests: dict[str, Any] = field(default_factory=dict)
    # perf_counter seconds (the engine's clock) to epoch nanoseconds.
    epoch_offset_ns: int = field(default_factory=lambda: time.time_ns() - time.perf_counter_ns())
    lock: threading.Lock = field(default_factory=threading.Lock)

    def to_epoch_ns(self, perf_seconds: float) -> int:
        return int(perf_seconds * 1e9) + self.epoch_offset_ns

    def flush(self, timeout_ms: int = 5000) -> bool:
        return bool(self.provider.force_flush(timeout_ms))

    def shutdown(self) -> None:
        self.provider.shutdown()


_current: Tracing | None = None


def current() -> Tracing | None:
    return _current


def configure(endpoint: str | None = None, *, exporter: Any = None) -> Tracing | None:
    """Turn tracing on for this process when an endpoint (argument, else the
    environment) or an ``exporter`` (tests) is given; else leave it off."""
    global _current
    endpoint = endpoint or endpoint_from_env()
    if endpoint is None and exporter is None:
        _current = None
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as exc:
        raise RuntimeError("OpenTelemetry tracing needs the otel extra: pip install 'sift-server[otel]'") from exc
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if endpoint is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint))))
        log.info("OpenTelemetry traces go to %s", traces_url(endpoint))
    _current = Tracing(provider, provider.get_tracer("sift_server"))
    return _current


def start(endpoint: str | None) -> Tracing | None:
    """At server start: tracing on when ``endpoint`` or the environment names one;
    otherwise whatever is configured stays (nothing, unless a test set an exporter)."""
    if _current is None and (endpoint or endpoint_from_env()):
        return configure(endpoint)
    return _current


def disable() -> None:
    """Tracing off (shuts the current provider down, flushing what it holds)."""
    global _current
    if _current is not None:
        _current.shutdown()
    _current = None
