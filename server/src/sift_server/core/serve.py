"""The serving core's one entry: (endpoint, model, headers, body) in, a typed reply
out, or a domain error raised (``sift_server.errors``).

``sift serve``'s HTTP routes and the cluster worker both call ``handle``: the
routes with what the socket gave them, the worker with a queue message's
fields. Neither re-enters the other's layer. Errors stay typed up to the
caller, which decides what they mean there (an HTTP answer, or ack / nak /
terminate); ``error_reply`` renders one in its endpoint's envelope.

``SERVING`` says what runs each endpoint of the table (core/endpoints.py): how its
body is decoded (``decode``, which the gateway also runs so that a malformed body
never reaches the queue) and how the decoded request is answered (``run``).
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sift_server import WIRE_COMPAT_VERSION
from sift_server.core.embeddings import embeddings_answer, input_texts, parse_embeddings
from sift_server.core.endpoints import Endpoint
from sift_server.core.envelopes import native_envelope, openai_envelope, render_json
from sift_server.core.rerank import parse_rerank, rerank_answer, score_body
from sift_server.core.state import ServerState
from sift_server.core.transcriptions import parse_transcription, transcription_answer
from sift_server.engine.ingress import IngressTicket
from sift_server.errors import InvalidInput, SiftError, TaskNotSupported
from sift_server.generation import service as generation
from sift_server.registry.registry import Registry
from sift_server.service.common import Limits
from sift_server.service.encode import encode
from sift_server.service.extract import extract
from sift_server.service.run import Outcome, RequestContext
from sift_server.service.score import score
from sift_server.service.transcribe import transcribe
from sift_server.wire.negotiation import JSON_TYPE, MSGPACK_TYPE, request_format, response_format
from sift_server.wire.schemas import EncodeBody, Item
from sift_server.wire.sliced import decode_sliced, encode_sliced
from sift_server.wire.split import Buffer


@dataclass(slots=True)
class Reply:
    """An answer. ``body``: the whole body, or its chunks as they are made (a
    streamed answer: sent as they come, without a Content-Length)."""

    status: int
    headers: dict[str, str]
    body: bytes | AsyncIterable[bytes]
    media_type: str = JSON_TYPE


@dataclass(slots=True)
class Call:
    """One request to the core. ``headers``: a mapping read by lower-case name
    (content-type, accept, x-request-id)."""

    endpoint: Endpoint
    model: str
    headers: Mapping[str, str]
    body: Buffer
    # Opened where the request arrived (HTTP headers, a delivered message); None: not yet.
    ingress: IngressTicket | None = None
    # Makes an awaitable that resolves when nobody waits for the answer any more.
    disconnected: Callable[[], Awaitable[Any]] | None = None
    started: float = field(default_factory=time.perf_counter)


_id_prefix = secrets.token_hex(8)
_id_counter = itertools.count()


def new_request_id() -> str:
    """32 lowercase hex, unique per process (a random prefix and a counter): as
    unique as a UUID here, without reading the kernel's random source per request."""
    return f"{_id_prefix}{next(_id_counter) & 0xFFFFFFFFFFFFFFFF:016x}"


def usable_request_id(given: str) -> bool:
    """A client's X-Request-ID is kept when it is short and printable."""
    return 0 < len(given) <= 128 and given.isprintable()


def request_id_of(headers: Mapping[str, str]) -> str:
    """The client's X-Request-ID when it is usable, else a new one."""
    given = headers.get("x-request-id")
    if given is not None and usable_request_id(given):
        return given
    return new_request_id()


async def handle(state: ServerState, call: Call) -> Reply:
    """Run one request; raises ``SiftError`` (counted in the metrics) when it fails."""
    return await SERVING[call.endpoint.name].run(state, call)


async def decode(call: Call) -> tuple[str, Any]:
    """The model a request names (its path's, or its body's) and its decoded body;
    raises the ``SiftError`` that ``handle`` would for a malformed body."""
    return await SERVING[call.endpoint.name].decode(call)


def error_reply(state: ServerState, endpoint: Endpoint | None, error: SiftError) -> Reply:
    """``error`` in ``endpoint``'s envelope (None: no endpoint, the native one; the
    native one carries the runtime instance)."""
    if endpoint is not None and endpoint.family == "openai":
        status, body, headers = openai_envelope(error)
    else:
        status, body, headers = native_envelope(error, state.runtime_instance)
    return Reply(status, headers, render_json(body))


async def _decode_native(call: Call) -> tuple[str, Any]:
    fmt = request_format(call.headers.get("content-type"))
    return call.model, await decode_sliced(call.body, fmt, call.endpoint.schema, "items", Item)


Service = Callable[[Registry, str, Any, Limits, RequestContext], Awaitable[Outcome]]


def _native(service: Service) -> Callable[[ServerState, Call], Awaitable[Reply]]:
    """A native endpoint: the body decoded, the use case run, its payload encoded."""

    async def run(state: ServerState, call: Call) -> Reply:
        try:
            return await _run_native(state, call, service)
        except SiftError as error:
            state.metrics.count(call.model, call.endpoint.name, error.status)
            raise

    return run


async def _run_native(state: ServerState, call: Call, service: Service) -> Reply:
    endpoint = call.endpoint
    ctx = RequestContext(request_id_of(call.headers), call.started, call.ingress, call.disconnected, prep=state.prep)
    _, decoded = await _decode_native(call)
    outcome = await service(state.registry, call.model, decoded, state.limits, ctx)
    out_fmt = response_format(call.headers.get("accept"))
    content = await encode_sliced(outcome.payload, out_fmt)
    headers = {"X-SIE-Server-Version": WIRE_COMPAT_VERSION, "X-SIE-Served-By": "local", "X-Request-ID": ctx.request_id}
    if endpoint.name != "extract":
        headers["X-SIE-Runtime-Instance"] = state.runtime_instance
    elapsed = time.perf_counter() - call.started
    headers.update(outcome.timing.headers(elapsed))
    state.metrics.count(call.model, endpoint.name, 200, elapsed)
    return Reply(200, headers, content, MSGPACK_TYPE if out_fmt == "msgpack" else JSON_TYPE)


@dataclass(frozen=True, slots=True)
class Serving:
    """What runs one endpoint: ``decode`` (its model and decoded body) and ``run``
    (the whole request: decode, serve, encode the answer; errors counted)."""

    decode: Callable[[Call], Awaitable[tuple[str, Any]]]
    run: Callable[[ServerState, Call], Awaitable[Reply]]


Answer = tuple[bytes, str, dict[str, str]]


def _body_route(
    decode: Callable[[Call], Awaitable[tuple[str, Any]]],
    serve: Callable[[ServerState, Any, RequestContext], Awaitable[Any]],
    render: Callable[[Any, Any, float], Answer],
    unsupported: str,
) -> Serving:
    """A route whose body names its model (the OpenAI-shaped ones): the body
    decoded, the request counted as an arrival from then on (the model is only
    known once the body is parsed, so this traffic feeds the arrival model as
    well), the use case run (``serve``) and its outcome rendered (``render``:
    body, media type, headers, given the elapsed seconds). A model without the
    task is a 400 naming the model, ``unsupported`` being its message with
    ``{model}`` in it."""

    async def run(state: ServerState, call: Call) -> Reply:
        ingress = call.ingress
        model = ""
        try:
            model, body = await decode(call)
            if ingress is None:
                ingress = state.registry.begin_ingress(model, call.started)
            ctx = RequestContext(request_id_of(call.headers), call.started, ingress, call.disconnected, prep=state.prep)
            try:
                outcome = await serve(state, body, ctx)
            except TaskNotSupported as error:
                raise InvalidInput(unsupported.format(model=model), param="model") from error
        except SiftError as error:
            state.metrics.count(model, call.endpoint.name, error.status)
            raise
        finally:
            if ingress is not None:
                ingress.end()
        elapsed = time.perf_counter() - call.started
        content, media_type, headers = render(body, outcome, elapsed)
        state.metrics.count(model, call.endpoint.name, 200, elapsed)
        return Reply(200, {"X-SIE-Served-By": "local", "X-Request-ID": ctx.request_id, **headers}, content, media_type)

    return Serving(decode, run)


async def _decode_embeddings(call: Call) -> tuple[str, Any]:
    body = await parse_embeddings(call.body, call.headers.get("content-type"))
    return body.model, body


async def _serve_embeddings(state: ServerState, body: Any, ctx: RequestContext) -> Any:
    native = EncodeBody(items=[Item(text=t) for t in input_texts(body.input)])
    return await encode(state.registry, body.model, native, state.limits, ctx, dimensions=body.dimensions)


def _render_embeddings(body: Any, outcome: Any, elapsed: float) -> Answer:
    return embeddings_answer(body, outcome.vectors, outcome.input_tokens), JSON_TYPE, {}


async def _decode_rerank(call: Call) -> tuple[str, Any]:
    body = await parse_rerank(call.body, call.headers.get("content-type"))
    return body.model, body


async def _serve_rerank(state: ServerState, body: Any, ctx: RequestContext) -> Any:
    """The score service over the same pairs, so the engine batches them as a score request's."""
    return await score(state.registry, body.model, score_body(body), state.limits, ctx)


def _render_rerank(body: Any, outcome: Any, elapsed: float) -> Answer:
    return rerank_answer(body, outcome.payload), JSON_TYPE, {}


async def _decode_transcription(call: Call) -> tuple[str, Any]:
    body = await parse_transcription(call.body, call.headers.get("content-type"))
    return body.model, body


async def _serve_transcription(state: ServerState, body: Any, ctx: RequestContext) -> Any:
    return await transcribe(state.registry, body, state.limits, ctx)


def _render_transcription(body: Any, outcome: Any, elapsed: float) -> Answer:
    """Answered in the asked ``response_format``."""
    content, media_type = transcription_answer(body, outcome.text, outcome.segments, outcome.language, outcome.duration)
    return content, media_type, outcome.timing.headers(elapsed)


def _generation(
    run: Callable[[ServerState, generation.CallLike, str], Awaitable[generation.Answer]],
) -> Callable[[ServerState, Call], Awaitable[Reply]]:
    """A generation route (generation/service.py): its answer whole, or streamed as
    server-sent events; counted in the metrics like every route."""

    async def serve(state: ServerState, call: Call) -> Reply:
        try:
            answer = await run(state, call, request_id_of(call.headers))
        except SiftError as error:
            state.metrics.count(call.model, call.endpoint.name, error.status)
            raise
        state.metrics.count(call.model, call.endpoint.name, 200, time.perf_counter() - call.started)
        return Reply(answer.status, answer.headers, answer.body, answer.media_type)

    return serve


# By endpoint name (core/endpoints.py): a new endpoint's entry there and its service here.
SERVING: dict[str, Serving] = {
    "encode": Serving(_decode_native, _native(encode)),
    "score": Serving(_decode_native, _native(score)),
    "extract": Serving(_decode_native, _native(extract)),
    "embeddings": _body_route(
        _decode_embeddings,
        _serve_embeddings,
        _render_embeddings,
        "Model '{model}' does not produce embeddings.",
    ),
    "rerank": _body_route(
        _decode_rerank,
        _serve_rerank,
        _render_rerank,
        "Model '{model}' does not support reranking (no score task). Use a reranker model.",
    ),
    "generate": Serving(generation.decode_generate, _generation(generation.run_generate)),
    "chat": Serving(generation.decode_chat, _generation(generation.run_chat)),
    "completions": Serving(generation.decode_completions, _generation(generation.run_completions)),
    "responses": Serving(generation.decode_responses, _generation(generation.run_responses)),
    "transcriptions": _body_route(
        _decode_transcription,
        _serve_transcription,
        _render_transcription,
        "Model '{model}' does not transcribe audio.",
    ),
}
