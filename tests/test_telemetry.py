"""OpenTelemetry traces (issue 23.6): off by default; when on, a span per request
(with its queue wait, continuing the caller's traceparent), a span per forward
linked to the requests it carried, exported over OTLP/HTTP to a receiver started
here; and trace context carried through message headers (gateway to worker)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sift_server.api.app import create_app
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.registry.catalog import Catalog
from sift_server.telemetry import propagation, tracing
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class Receiver:
    """A minimal OTLP/HTTP trace receiver: POST /v1/traces, protobuf bodies."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                received.paths.append(self.path)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        received.spans.extend(scope.spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("SIFT_OTLP_ENDPOINT", tracing.OTEL_ENDPOINT_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    tracing.disable()
    yield
    tracing.disable()


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("telemetry")
    folder = root / "catalog"
    write_catalog_entry(folder, build_tiny_embedder(root / "model"))
    return folder


async def serve(catalog: Path, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    config = Settings(default_model=TINY_EMBEDDER, catalog=[catalog], torch_threads=1, calibrate=False, **settings)
    app = create_app(build_state(config, catalog=Catalog.from_dirs([catalog], include_shipped=False)))
    transport = httpx.ASGITransport(app=app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as client:
        yield client


async def encode_three(client: httpx.AsyncClient) -> None:
    """Three requests sent together (one forward or a few), the first continuing a trace."""
    bodies = [{"items": [{"text": f"text number {i}"}] * (i + 1)} for i in range(3)]
    headers = [{"traceparent": PARENT}, {"x-request-id": "client-id-1"}, {}]
    replies = await asyncio.gather(
        *(client.post(f"/v1/encode/{TINY_EMBEDDER}", json=b, headers=h) for b, h in zip(bodies, headers, strict=True))
    )
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert replies[1].headers["x-request-id"] == "client-id-1"


async def test_off_by_default(catalog: Path) -> None:
    async for client in serve(catalog):
        assert tracing.current() is None
        await encode_three(client)


async def test_spans_for_requests_and_forwards_reach_an_otlp_receiver(catalog: Path, receiver: Receiver) -> None:
    memory = InMemorySpanExporter()
    traced = tracing.configure(receiver.url, exporter=memory)
    assert traced is not None
    async for client in serve(catalog):
        await encode_three(client)
        assert (await client.get("/healthz")).status_code == 200  # probes are not traced
    assert traced.flush()

    spans = memory.get_finished_spans()
    requests = [s for s in spans if s.name == "POST /v1/encode/{model}"]
    forwards = [s for s in spans if s.name == "forward"]
    assert len(requests) == 3 and len(spans) == len(requests) + len(forwards)
    for span in requests:
        assert span.attributes["http.response.status_code"] == 200
        assert span.attributes["sift.model"] == TINY_EMBEDDER
        assert span.attributes["sift.queue_wait_s"] >= 0.0
    assert {s.attributes["sift.request_id"] for s in requests} >= {"client-id-1"}
    # The caller's trace continues: same trace id, its span as parent.
    continued = [s for s in requests if format(s.context.trace_id, "032x") == TRACE_ID]
    assert len(continued) == 1 and continued[0].parent is not None
    assert format(continued[0].parent.span_id, "016x") == "00f067aa0ba902b7"

    # Every request is carried by forwards that link to its span; sizes add up.
    request_ids = {s.context.span_id for s in requests}
    linked = [link.context.span_id for f in forwards for link in f.links]
    assert set(linked) == request_ids
    assert sum(f.attributes["sift.batch.items"] for f in forwards) == 1 + 2 + 3
    for forward in forwards:
        assert forward.attributes["sift.batch.requests"] == len(forward.links)
        assert forward.attributes["sift.backend"] == "torch"
        assert forward.attributes["sift.lane"] and forward.attributes["sift.dispatch_reason"]
        assert forward.end_time >= forward.start_time

    # The same spans went over OTLP/HTTP (protobuf) to the receiver.
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    assert sorted(s.name for s in receiver.spans) == sorted(s.name for s in spans)
    exported = {s.span_id.hex(): s for s in receiver.spans}
    assert exported[format(continued[0].context.span_id, "016x")].trace_id.hex() == TRACE_ID


def test_trace_context_travels_in_message_headers() -> None:
    memory = InMemorySpanExporter()
    traced = tracing.configure(exporter=memory)
    assert traced is not None
    headers: dict[str, str] = {}
    with traced.tracer.start_as_current_span("gateway request") as gateway:
        propagation.inject(headers)
    assert "traceparent" in headers
    with propagation.request_span("worker request", headers, model="m") as worker:
        assert worker is not None
    assert worker.context.trace_id == gateway.context.trace_id
    assert worker.parent.span_id == gateway.context.span_id
    assert worker.attributes["model"] == "m"


def test_message_headers_without_tracing() -> None:
    headers: dict[str, str] = {}
    propagation.inject(headers)
    assert headers == {} and propagation.extract({"traceparent": PARENT}) is None
    with propagation.request_span("worker request", {"traceparent": PARENT}) as span:
        assert span is None


def test_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch, receiver: Receiver) -> None:
    assert tracing.start(None) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    assert tracing.start(None) is not None
    assert tracing.traces_url(receiver.url) == f"{receiver.url}/v1/traces"
    assert tracing.traces_url(f"{receiver.url}/v1/traces") == f"{receiver.url}/v1/traces"


async def test_a_forwarded_request_continues_the_gateways_trace(catalog: Path) -> None:
    """As the gateway forwards a request to a worker: the worker's app gets the
    gateway span's context in the forwarded headers and continues that trace."""
    memory = InMemorySpanExporter()
    traced = tracing.configure(exporter=memory)
    assert traced is not None
    async for worker in serve(catalog):
        with traced.tracer.start_as_current_span("POST /v1/encode/{model} (gateway)") as gateway:
            forwarded = dict(propagation.context_headers())
        reply = await worker.post(f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": "a"}]}, headers=forwarded)
        assert reply.status_code == 200
    [request] = [s for s in memory.get_finished_spans() if s.name == "POST /v1/encode/{model}"]
    assert request.context.trace_id == gateway.context.trace_id
    assert request.parent is not None and request.parent.span_id == gateway.context.span_id


async def test_a_queued_message_continues_the_gateways_trace_in_the_worker(catalog: Path) -> None:
    """The cluster worker calls the serving core directly (no ASGI app): its span per
    message continues the trace in the message's headers, and the forward that carried
    the request links to that span."""
    from sift_server.cluster.worker import call_core

    memory = InMemorySpanExporter()
    traced = tracing.configure(exporter=memory)
    assert traced is not None
    config = Settings(default_model=TINY_EMBEDDER, catalog=[catalog], torch_threads=1, calibrate=False)
    state = build_state(config, catalog=Catalog.from_dirs([catalog], include_shipped=False))
    await state.registry.load_now(TINY_EMBEDDER)
    try:
        with traced.tracer.start_as_current_span("POST /v1/encode/{model} (gateway)") as gateway:
            headers = [("x-request-id", "queued-1"), *propagation.context_headers()]
        headers.append(("content-type", "application/json"))
        reply = await call_core(
            state,
            f"/v1/encode/{TINY_EMBEDDER}",
            headers,
            b'{"items": [{"text": "a"}]}',
            ingress=None,
            deadline=float("inf"),
        )
        assert reply.status == 200
    finally:
        await state.registry.close(1.0)
    spans = memory.get_finished_spans()
    [message] = [s for s in spans if s.name == f"POST /v1/encode/{TINY_EMBEDDER}"]
    assert message.context.trace_id == gateway.context.trace_id
    assert message.parent is not None and message.parent.span_id == gateway.context.span_id
    forwards = [s for s in spans if any(link.context.span_id == message.context.span_id for link in s.links)]
    assert len(forwards) == 1
