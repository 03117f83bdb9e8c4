"""Trace context in message headers (W3C ``traceparent`` / ``tracestate``), so a
request's trace continues from the gateway into the worker that runs it.

The gateway adds ``context_headers()`` to the HTTP headers it forwards in a work
message, while that request's span is current (inside the ``TraceRequests``
layer). The worker calls the serving core directly (no ASGI app), inside
``message_span``: a span per message, child of the context in its headers, and
registered by request id so the forward that carries it links to it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

from sift_server.telemetry import tracing


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's context to ``headers`` (nothing when tracing is off)."""
    if tracing.current() is None:
        return
    from opentelemetry.propagate import inject as otel_inject

    otel_inject(headers)


def context_headers() -> list[tuple[str, str]]:
    """The current span's context as header pairs (empty when tracing is off)."""
    carrier: dict[str, str] = {}
    inject(carrier)
    return list(carrier.items())


def extract(headers: Mapping[str, str] | None) -> Any:
    """The context carried by ``headers`` (None when tracing is off or there is none)."""
    if tracing.current() is None or not headers:
        return None
    from opentelemetry.propagate import extract as otel_extract

    return otel_extract(dict(headers))


@contextmanager
def request_span(name: str, headers: Mapping[str, str] | None, **attributes: Any) -> Iterator[Any]:
    """A server span for one message, child of the context in its ``headers``;
    yields None when tracing is off."""
    traced = tracing.current()
    if traced is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    with traced.tracer.start_as_current_span(
        name, context=extract(headers), kind=SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield span


@contextmanager
def message_span(name: str, headers: Mapping[str, str], **attributes: Any) -> Iterator[Any]:
    """``request_span`` for a queued message, open by its ``x-request-id`` while it
    runs, as ``TraceRequests`` does for an HTTP request (forward spans link to it)."""
    request_id = headers.get("x-request-id")
    with request_span(name, headers, **attributes) as span:
        traced = tracing.current()
        if span is not None and traced is not None and request_id:
            with traced.lock:
                traced.open_requests[request_id] = span
        try:
            yield span
        finally:
            if span is not None and traced is not None and request_id:
                with traced.lock:
                    traced.open_requests.pop(request_id, None)
