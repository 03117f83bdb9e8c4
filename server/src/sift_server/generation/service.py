"""The generation routes' use cases: a decoded body in, an answer (whole, or its
server-sent events as they are made) out, or a ``SiftError`` raised before any
work. core/serve.py wraps these as its ``SERVING`` entries.

Every check (the body's fields, the grammar's compilation, the prompt against the
model's context, the answer's length against its cap) runs before the engine sees
the request; a request that fails one disturbs nothing in flight."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from sift_server.core.state import ServerState
from sift_server.errors import InvalidInput, ModelNotFound, SiftError, TaskNotSupported
from sift_server.generation import answers, grammar
from sift_server.generation.adapter import GenerationAdapter
from sift_server.generation.meter import GenerationMeter
from sift_server.generation.params import Sampling, check_context, check_engine, sampling
from sift_server.generation.remote import RemoteGenerationAdapter
from sift_server.generation.text import AnswerText
from sift_server.generation.upstream import DONE, Endpoint, UpstreamRequest
from sift_server.generation.wire import (
    ChatBody,
    ChatMessage,
    CompletionsBody,
    ContentPart,
    GenerateBody,
    ResponsesBody,
    decode_body,
)
from sift_server.service.common import catalog_name, require_task
from sift_server.wire.split import Buffer

SSE_TYPE = "text/event-stream"
JSON_TYPE = "application/json"

# A model that decodes here (an engine in process) or one an operator's upstream serves.
Model = GenerationAdapter | RemoteGenerationAdapter


class CallLike(Protocol):
    model: str
    headers: Mapping[str, str]
    body: Buffer
    disconnected: Callable[[], Awaitable[Any]] | None
    started: float


@dataclass(slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes | AsyncIterator[bytes]
    media_type: str = JSON_TYPE


@dataclass(slots=True)
class Piece:
    """Text that can be sent, and on the last piece why the answer ended."""

    text: str
    finish: str | None
    completion_tokens: int


@dataclass(slots=True)
class Run:
    """One admitted generation: its model, prompt and sampling, and its clock."""

    name: str
    adapter: Model
    prompt_ids: list[int]
    sampling: Sampling
    request_id: str
    started: float
    # A remote model's call; its usage is the upstream's count, known at the end.
    upstream: UpstreamRequest | None = None
    first_token: float | None = None
    finished: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = field(default=0)

    def ttft_ms(self) -> float:
        return 0.0 if self.first_token is None else (self.first_token - self.started) * 1000

    def tpot_ms(self) -> float:
        if self.first_token is None or self.finished is None or self.completion_tokens < 2:
            return 0.0
        return (self.finished - self.first_token) * 1000 / (self.completion_tokens - 1)

    def usage(self) -> dict[str, int]:
        return answers.usage(self.prompt_tokens, self.completion_tokens)


# ---- the model ---------------------------------------------------------------------


def generation_model(state: ServerState, model: str) -> tuple[str, Model]:
    """The catalog's generation model ``model`` names (``Org__Name`` path ids are
    ``Org/Name``), loaded; raises while it loads, as every route does."""
    registry = state.registry
    name = catalog_name(registry.records, model)
    record = registry.record(name)
    try:
        require_task(record, "generate")
    except TaskNotSupported as error:
        raise InvalidInput(error.message, param="model") from error
    record, _ = registry.ready_engine(name)
    adapter = record.adapter
    if not isinstance(adapter, (GenerationAdapter, RemoteGenerationAdapter)):
        raise ModelNotFound(f"Model '{name}' is not a generation model.")
    return name, adapter


# ---- the answer as it is made --------------------------------------------------------


async def pieces(run: Run, meter: GenerationMeter | None = None) -> AsyncIterator[Piece]:
    """The answer as sendable text, metered (active count, why it ended, tokens);
    closing this cancels the generation."""
    if meter is not None:
        meter.started(run.name)
    finished: str | None = None
    failed = False
    try:
        async for piece in _made(run):
            if piece.finish is not None:
                finished = piece.finish
            yield piece
    except Exception:
        failed = True
        raise
    finally:
        if meter is not None:
            reason = finished or ("error" if failed else "cancelled")
            meter.done(run.name, reason, run.prompt_tokens, run.completion_tokens)


async def _made(run: Run) -> AsyncIterator[Piece]:
    """The engine's tokens (or the upstream's text) as sendable text."""
    if isinstance(run.adapter, RemoteGenerationAdapter):
        async for piece in remote_pieces(run, run.adapter):
            yield piece
        return
    text = AnswerText(run.adapter.decode, run.sampling.stop)
    steps = run.adapter.engine.generate(run.prompt_ids, run.sampling)
    try:
        async for step in steps:
            if step.ids and run.first_token is None:
                run.first_token = time.perf_counter()
            delta = _add(text, step.ids, run)
            if text.stopped or step.finish is not None:
                run.finished = time.perf_counter()
                yield Piece(delta + text.finish(), "stop" if text.stopped else step.finish, run.completion_tokens)
                return
            if delta:
                yield Piece(delta, None, run.completion_tokens)
    finally:
        await steps.aclose()


def _add(text: AnswerText, ids: tuple[int, ...], run: Run) -> str:
    """The text ``ids`` add, counted in the run's completion tokens. A step may join several
    of the engine's (engine_process.joined); with stop sequences they go in one at a time,
    so the count stops at the token that met one, as it would have unjoined."""
    if len(ids) == 1 or not text.stops:
        run.completion_tokens += len(ids)
        return text.add(ids)
    delta = []
    for token in ids:
        run.completion_tokens += 1
        delta.append(text.add((token,)))
        if text.stopped:
            break
    return "".join(delta)


async def remote_pieces(run: Run, adapter: RemoteGenerationAdapter) -> AsyncIterator[Piece]:
    """The upstream's text as it comes; the finish is held until its usage (the
    chunk after it) so the last piece carries both. Closing this closes the call."""
    assert run.upstream is not None
    finish = "stop"
    chunks = adapter.stream(run.upstream)
    try:
        async for chunk in chunks:
            if chunk is DONE:
                break
            if chunk.text and run.first_token is None:
                run.first_token = time.perf_counter()
            if chunk.prompt_tokens is not None:
                run.prompt_tokens = chunk.prompt_tokens
            if chunk.completion_tokens is not None:
                run.completion_tokens = chunk.completion_tokens
            if chunk.finish is not None:
                finish = chunk.finish
            if chunk.text:
                yield Piece(chunk.text, None, run.completion_tokens)
        run.finished = time.perf_counter()
        yield Piece("", finish, run.completion_tokens)
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]


async def until_gone(
    source: AsyncIterator[Piece], disconnected: Callable[[], Awaitable[Any]] | None
) -> AsyncIterator[Piece]:
    """``source`` until the client goes away; then it is closed (the engine drops
    the request) instead of generating for nobody.

    The disconnect is watched by one task for the whole answer: when it fires while a piece
    is awaited, the awaiting task is cancelled out of that wait (and un-cancelled here), so a
    piece costs no task of its own (a task and an ``asyncio.wait`` per token were a visible
    share of the server's work per token)."""
    if disconnected is None:
        try:
            async for piece in source:
                yield piece
        finally:
            await source.aclose()  # type: ignore[attr-defined]
        return
    gone: asyncio.Future[Any] = asyncio.ensure_future(disconnected())
    reader: asyncio.Task[Any] | None = None  # the task awaiting a piece, while it does
    interrupted = False

    def interrupt(_: object) -> None:
        nonlocal interrupted
        if reader is not None and not gone.cancelled():
            interrupted = True
            reader.cancel()

    gone.add_done_callback(interrupt)
    try:
        while not gone.done():
            reader = asyncio.current_task()
            try:
                piece = await anext(source)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                assert reader is not None
                if interrupted and reader.uncancel() == 0:
                    return  # the client went away: not a cancellation of the caller
                raise
            finally:
                reader = None
            yield piece
    finally:
        gone.remove_done_callback(interrupt)
        gone.cancel()
        with contextlib.suppress(RuntimeError):
            await source.aclose()  # type: ignore[attr-defined]


async def opened(run: Run, call: CallLike, meter: GenerationMeter | None) -> AsyncIterator[Piece]:
    """A streamed answer's pieces. For a remote model the upstream's first piece is
    awaited before the answer's status goes out, so an upstream that fails before any
    text (unreachable, a timeout, a refusal) is a 502/504/400 envelope, not a 200
    stream carrying an error event."""
    stream = until_gone(pieces(run, meter), call.disconnected)
    if run.upstream is None:
        return stream
    try:
        first = await anext(stream)
    except StopAsyncIteration:
        return stream
    return _after(first, stream)


async def _after(first: Piece, rest: AsyncIterator[Piece]) -> AsyncIterator[Piece]:
    try:
        yield first
        async for piece in rest:
            yield piece
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


async def whole(run: Run, call: CallLike, meter: GenerationMeter | None = None) -> tuple[str, str]:
    """The whole answer's text and finish reason."""
    parts: list[str] = []
    finish = "cancelled"
    async for piece in until_gone(pieces(run, meter), call.disconnected):
        parts.append(piece.text)
        if piece.finish is not None:
            finish = piece.finish
    return "".join(parts), finish


def admit(
    name: str,
    adapter: GenerationAdapter,
    prompt_ids: list[int],
    wanted: Sampling,
    *,
    max_field: str,
    request_id: str,
    started: float,
    grammar_field: str = "grammar",
) -> Run:
    """The generation, once its prompt fits the model's context with the answer asked for."""
    check_engine(wanted, greedy_only=adapter.greedy_only, grammar=adapter.grammar, grammar_field=grammar_field)
    check_context(len(prompt_ids), wanted, adapter.limits, max_field=max_field)
    return Run(name, adapter, prompt_ids, wanted, request_id, started, prompt_tokens=len(prompt_ids))


def admit_remote(
    name: str,
    adapter: RemoteGenerationAdapter,
    endpoint: Endpoint,
    prompt: dict[str, Any],
    wanted: Sampling,
    *,
    request_id: str,
    started: float,
    extra: dict[str, Any] | None = None,
) -> Run:
    """The upstream call for a validated request: its prompt (``prompt`` or
    ``messages``), its sampling as checked here, and ``extra`` (``response_format``)."""
    fields: dict[str, Any] = {
        **prompt,
        "max_tokens": wanted.max_new_tokens,
        "temperature": wanted.temperature,
        "top_p": wanted.top_p,
    }
    if wanted.top_k:
        fields["top_k"] = wanted.top_k
    if wanted.seed is not None:
        fields["seed"] = wanted.seed
    if wanted.stop:
        fields["stop"] = list(wanted.stop)
    fields.update(extra or {})
    return Run(name, adapter, [], wanted, request_id, started, upstream=UpstreamRequest(endpoint, fields))


def _stream_reply(events: AsyncIterator[bytes], request_id: str) -> Answer:
    return Answer(
        200, {"X-SIE-Served-By": "local", "X-Request-ID": request_id, "Cache-Control": "no-cache"}, events, SSE_TYPE
    )


def _json_reply(body: dict[str, Any], request_id: str) -> Answer:
    return Answer(200, {"X-SIE-Served-By": "local", "X-Request-ID": request_id}, answers.render(body))


def _remote_prompt(prompt: str) -> dict[str, Any]:
    if not prompt:
        raise InvalidInput("The prompt is empty.", param="prompt")
    return {"prompt": prompt}


def _admit_prompt(
    name: str,
    adapter: GenerationAdapter | RemoteGenerationAdapter,
    prompt: str,
    wanted: Sampling,
    *,
    max_field: str,
    request_id: str,
    started: float,
) -> Run:
    """A text prompt's run: forwarded as an upstream completion for a remote model,
    else tokenized and admitted to the local engine (``admit``)."""
    if isinstance(adapter, RemoteGenerationAdapter):
        remote_prompt = _remote_prompt(prompt)
        return admit_remote(name, adapter, "completions", remote_prompt, wanted, request_id=request_id, started=started)
    return admit(
        name, adapter, adapter.encode(prompt), wanted, max_field=max_field, request_id=request_id, started=started
    )


def _refuse(value: object, neutral: object, name: str, why: str = "") -> None:
    if value is not None and value != neutral:
        raise InvalidInput(f"'{name}' is not supported by Sift's generation routes{why}.", param=name)


# ---- POST /v1/generate/{model} ------------------------------------------------------------


async def decode_generate(call: CallLike) -> tuple[str, Any]:
    return call.model, decode_body(call.body, GenerateBody)


async def run_generate(state: ServerState, call: CallLike, request_id: str) -> Answer:
    _, body = await decode_generate(call)
    for name, value, neutral in (
        ("images", body.images, []),
        ("logit_bias", body.logit_bias, {}),
        ("logprobs", body.logprobs, False),
        ("lora_adapter", body.lora_adapter, None),
        ("frequency_penalty", body.frequency_penalty, 0.0),
        ("presence_penalty", body.presence_penalty, 0.0),
    ):
        _refuse(value, neutral, name)
    name, adapter = generation_model(state, call.model)
    remote = isinstance(adapter, RemoteGenerationAdapter)
    if remote:
        _refuse(body.grammar, None, "grammar", " for a remote model; use /v1/chat/completions with response_format")
    wanted = sampling(
        max_new_tokens=body.max_new_tokens,
        default_max_new_tokens=body.max_new_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        stop=body.stop,
        grammar=None if remote else grammar.from_native(body.grammar),
        limits=adapter.limits,
    )
    run = _admit_prompt(
        name, adapter, body.prompt, wanted, max_field="max_new_tokens", request_id=request_id, started=call.started
    )
    if not body.stream:
        text, finish = await whole(run, call, state.generations)
        return _json_reply(
            answers.generate_answer(name, text, finish, run.usage(), request_id, run.ttft_ms(), run.tpot_ms()),
            request_id,
        )

    stream = await opened(run, call, state.generations)

    async def events() -> AsyncIterator[bytes]:
        seq = 0
        try:
            async for piece in stream:
                if piece.finish is None:
                    yield answers.sse(answers.generate_chunk(request_id, seq, piece.text))
                else:
                    chunk = answers.generate_last_chunk(
                        request_id, seq, piece.text, piece.finish, run.usage(), run.ttft_ms()
                    )
                    yield answers.sse(chunk)
                seq += 1
        except SiftError as error:
            yield answers.sse(answers.error_chunk(error, request_id))
        yield answers.DONE

    return _stream_reply(events(), request_id)


# ---- POST /v1/chat/completions ---------------------------------------------------------


def _content_text(content: str | list[ContentPart] | None, param: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type not in ("text", "input_text") or part.text is None:
            raise InvalidInput(f"Only text content parts are supported, not '{part.type}'.", param=param)
        texts.append(part.text)
    return "".join(texts)


def _messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    if not messages:
        raise InvalidInput("'messages' must not be empty.", param="messages")
    rendered = []
    for message in messages:
        if message.tool_calls or message.tool_call_id is not None:
            raise InvalidInput("Tool calls are not supported by Sift's generation routes.", param="messages")
        role = "system" if message.role == "developer" else message.role
        rendered.append({"role": role, "content": _content_text(message.content, "messages")})
    return rendered


async def decode_chat(call: CallLike) -> tuple[str, Any]:
    body = decode_body(call.body, ChatBody)
    return body.model, body


async def run_chat(state: ServerState, call: CallLike, request_id: str) -> Answer:
    _, body = await decode_chat(call)
    for name, value, neutral in (
        ("n", body.n, 1),
        ("best_of", body.best_of, 1),
        ("logprobs", body.logprobs, False),
        ("logit_bias", body.logit_bias, {}),
        ("tools", body.tools, []),
        ("lora_adapter", body.lora_adapter, None),
        ("repetition_penalty", body.repetition_penalty, 1.0),
        ("frequency_penalty", body.frequency_penalty, 0.0),
        ("presence_penalty", body.presence_penalty, 0.0),
    ):
        _refuse(value, neutral, name)
    messages = _messages(body.messages)
    name, adapter = generation_model(state, body.model)
    field_name = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    wanted = sampling(
        max_new_tokens=body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens,
        default_max_new_tokens=min(adapter.limits.max_new_tokens_cap, 512),
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        stop=body.stop,
        grammar=grammar.from_response_format(
            body.response_format, compile=not isinstance(adapter, RemoteGenerationAdapter)
        ),
        limits=adapter.limits,
        max_field=field_name,
    )
    if isinstance(adapter, RemoteGenerationAdapter):
        extra = {} if body.response_format is None else {"response_format": msgspec.to_builtins(body.response_format)}
        run = admit_remote(
            name,
            adapter,
            "chat",
            {"messages": messages},
            wanted,
            request_id=request_id,
            started=call.started,
            extra=extra,
        )
    else:
        prompt_ids = adapter.chat_ids(messages)
        run = admit(
            name,
            adapter,
            prompt_ids,
            wanted,
            max_field=field_name,
            request_id=request_id,
            started=call.started,
            grammar_field="response_format",
        )
    answer_id, created = f"chatcmpl-{request_id}", int(time.time())
    if not body.stream:
        text, finish = await whole(run, call, state.generations)
        return _json_reply(answers.chat_answer(answer_id, created, name, text, finish, run.usage()), request_id)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    stream = await opened(run, call, state.generations)

    async def events() -> AsyncIterator[bytes]:
        yield answers.sse(answers.chat_chunk(answer_id, created, name, {"role": "assistant", "content": ""}, None))
        try:
            async for piece in stream:
                if piece.text:
                    yield answers.sse(answers.chat_chunk(answer_id, created, name, {"content": piece.text}, None))
                if piece.finish is not None:
                    yield answers.sse(answers.chat_chunk(answer_id, created, name, {}, piece.finish))
                    if include_usage:
                        yield answers.sse(
                            answers.usage_chunk(answer_id, created, name, "chat.completion.chunk", run.usage())
                        )
        except SiftError as error:
            yield answers.sse(answers.error_chunk(error, request_id))
        yield answers.DONE

    return _stream_reply(events(), request_id)


# ---- POST /v1/completions ----------------------------------------------------------------


async def decode_completions(call: CallLike) -> tuple[str, Any]:
    body = decode_body(call.body, CompletionsBody)
    return body.model, body


async def run_completions(state: ServerState, call: CallLike, request_id: str) -> Answer:
    _, body = await decode_completions(call)
    for name, value, neutral in (
        ("n", body.n, 1),
        ("best_of", body.best_of, 1),
        ("echo", body.echo, False),
        ("suffix", body.suffix, None),
        ("logprobs", body.logprobs, None),
        ("logit_bias", body.logit_bias, {}),
        ("frequency_penalty", body.frequency_penalty, 0.0),
        ("presence_penalty", body.presence_penalty, 0.0),
    ):
        _refuse(value, neutral, name)
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if len(prompts) != 1:
        raise InvalidInput("Send one prompt per request.", param="prompt")
    name, adapter = generation_model(state, body.model)
    wanted = sampling(
        max_new_tokens=body.max_tokens,
        default_max_new_tokens=16,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        stop=body.stop,
        grammar=None,
        limits=adapter.limits,
        max_field="max_tokens",
    )
    run = _admit_prompt(
        name, adapter, prompts[0], wanted, max_field="max_tokens", request_id=request_id, started=call.started
    )
    answer_id, created = f"cmpl-{request_id}", int(time.time())
    if not body.stream:
        text, finish = await whole(run, call, state.generations)
        return _json_reply(answers.completion_answer(answer_id, created, name, text, finish, run.usage()), request_id)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    stream = await opened(run, call, state.generations)

    async def events() -> AsyncIterator[bytes]:
        try:
            async for piece in stream:
                yield answers.sse(answers.completion_answer(answer_id, created, name, piece.text, piece.finish, None))
                if piece.finish is not None and include_usage:
                    yield answers.sse(answers.usage_chunk(answer_id, created, name, "text_completion", run.usage()))
        except SiftError as error:
            yield answers.sse(answers.error_chunk(error, request_id))
        yield answers.DONE

    return _stream_reply(events(), request_id)


# ---- POST /v1/responses ----------------------------------------------------------------------


async def decode_responses(call: CallLike) -> tuple[str, Any]:
    body = decode_body(call.body, ResponsesBody)
    return body.model, body


async def run_responses(state: ServerState, call: CallLike, request_id: str) -> Answer:
    _, body = await decode_responses(call)
    name, adapter = generation_model(state, body.model)
    if isinstance(body.input, str):
        messages = [{"role": "user", "content": body.input}]
    else:
        messages = [
            {"role": "system" if m.role == "developer" else m.role, "content": _content_text(m.content, "input")}
            for m in body.input
        ]
        if not messages:
            raise InvalidInput("'input' must not be empty.", param="input")
    wanted = sampling(
        max_new_tokens=body.max_output_tokens,
        default_max_new_tokens=min(adapter.limits.max_new_tokens_cap, 512),
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        stop=None,
        grammar=None,
        limits=adapter.limits,
        max_field="max_output_tokens",
    )
    if isinstance(adapter, RemoteGenerationAdapter):
        run = admit_remote(
            name, adapter, "chat", {"messages": messages}, wanted, request_id=request_id, started=call.started
        )
    else:
        run = admit(
            name,
            adapter,
            adapter.chat_ids(messages),
            wanted,
            max_field="max_output_tokens",
            request_id=request_id,
            started=call.started,
        )
    text, _ = await whole(run, call, state.generations)
    created = int(time.time())
    answer = answers.responses_answer(
        f"resp_{request_id}",
        f"msg_{secrets.token_hex(8)}",
        created,
        name,
        text,
        run.prompt_tokens,
        run.completion_tokens,
    )
    return _json_reply(answer, request_id)
