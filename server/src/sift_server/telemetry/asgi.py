"""One span per HTTP request: a pure-ASGI layer, outside every other layer.

It continues the caller's W3C ``traceparent``, makes the span current for the
request's handling (so the gateway's ``propagation.inject`` finds it), and
gives every request an ``X-Request-ID`` (the client's when it sent a usable
one): the engine reports forwards by request id, which is how a forward span
finds the request spans it carried."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sift_server.core.endpoints import native_route
from sift_server.core.serve import new_request_id, usable_request_id
from sift_server.telemetry import tracing

UNTRACED = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})
REQUEST_ID_HEADER = b"x-request-id"


def route_of(path: str) -> tuple[str, str | None]:
    """The route template and the model a path names (None where it names none)."""
    target = native_route(path)
    if target is not None and target[1]:
        return target[0].path + "{model}", target[1]
    return path, None


def with_request_id(scope: Scope) -> tuple[Scope, str]:
    """``scope`` with an X-Request-ID header (the client's if usable, else a new one)."""
    headers = list(scope.get("headers", ()))
    for index, (name, value) in enumerate(headers):
        if name == REQUEST_ID_HEADER:
            given = value.decode("latin-1")
            if usable_request_id(given):
                return scope, given
            del headers[index]
            break
    request_id = new_request_id()
    headers.append((REQUEST_ID_HEADER, request_id.encode()))
    return {**scope, "headers": headers}, request_id


class TraceRequests:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        traced = tracing.current()
        if traced is None or scope["type"] != "http" or scope["path"] in UNTRACED:
            await self.app(scope, receive, send)
            return
        from opentelemetry import trace
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, Status, StatusCode

        scope, request_id = with_request_id(scope)
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        route, model = route_of(scope["path"])
        method = scope.get("method", "GET")
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.path": scope["path"],
            "http.route": route,
            "sift.request_id": request_id,
        }
        if model is not None:
            attributes["sift.model"] = model
        span = traced.tracer.start_span(
            f"{method} {route}", context=extract(carrier), kind=SpanKind.SERVER, attributes=attributes
        )
        with traced.lock:
            traced.open_requests[request_id] = span
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            with trace.use_span(span, end_on_exit=False):
                await self.app(scope, receive, send_status)
        finally:
            with traced.lock:
                traced.open_requests.pop(request_id, None)
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()
