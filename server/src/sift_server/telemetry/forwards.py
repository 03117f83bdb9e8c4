"""One span per forward, linked to the request spans it carried, and each
request's queue wait on its request span: an engine observer
(``ModelEngine(observers=...)``), called on the event loop after each forward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sift_server.engine.trace import ForwardRecord
from sift_server.telemetry import tracing


def forward_spans(backend: Callable[[], str]) -> Callable[[ForwardRecord], None]:
    """The observer for one model; ``backend()`` says what runs its forwards now
    (read per forward: an ``auto`` model switches backend once)."""

    def observe(record: ForwardRecord) -> None:
        traced = tracing.current()
        if traced is not None:
            record_forward(traced, record, backend())

    return observe


def record_forward(traced: tracing.Tracing, record: ForwardRecord, backend: str) -> None:
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode

    with traced.lock:
        requests = [(rid, traced.open_requests.get(rid)) for rid in record.request_ids]
    links = []
    for (request_id, span), admitted in zip(requests, record.admitted, strict=False):
        if span is None:
            continue
        wait = max(0.0, record.start - admitted)
        links.append(Link(span.get_span_context(), {"sift.request_id": request_id, "sift.queue_wait_s": wait}))
        _record_wait(span, wait, record)
    attributes: dict[str, Any] = {
        "sift.model": record.model,
        "sift.lane": record.lane,
        "sift.backend": backend,
        "sift.forward_id": record.forward_id,
        "sift.dispatch_reason": record.reason,
        "sift.batch.requests": len(record.request_ids),
        "sift.batch.items": record.items,
        "sift.batch.cost": record.cost,
        "sift.batch.chunks": record.chunks,
    }
    span = traced.tracer.start_span(
        "forward",
        kind=SpanKind.INTERNAL,
        links=links,
        attributes=attributes,
        start_time=traced.to_epoch_ns(record.start),
    )
    if record.error is not None:
        span.set_status(Status(StatusCode.ERROR, record.error))
    span.end(end_time=traced.to_epoch_ns(record.end))


def _record_wait(span: Any, wait: float, record: ForwardRecord) -> None:
    """A request split over several forwards waited in the queue before the first:
    that wait is the attribute; every forward adds an event."""
    if "sift.queue_wait_s" not in (getattr(span, "attributes", None) or {}):
        span.set_attribute("sift.queue_wait_s", wait)
    span.add_event(
        "forward",
        {"sift.forward_id": record.forward_id, "sift.queue_wait_s": wait, "sift.batch.items": record.items},
        timestamp=None,
    )
