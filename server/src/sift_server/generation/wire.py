"""The generation routes' request bodies, decoded with msgspec: an unknown field,
a wrong type or a missing required field is a 400 before any work.

The fields are those sie-sdk 0.10.1's ``generate`` / ``stream_generate`` /
``chat_completions`` / ``responses`` and the OpenAI client send; the ones Sift
cannot honour yet are accepted only at their neutral value (service.py says so)."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec

from sift_server.errors import InvalidInput
from sift_server.wire.msgspec_text import top_field
from sift_server.wire.split import Buffer


class Grammar(msgspec.Struct, forbid_unknown_fields=True):
    """The native structured-output grammar: exactly one of the three."""

    json_schema: Any = None
    regex: str | None = None
    ebnf: str | None = None
    label: str | None = None
    strict: bool | None = None


class GenerateBody(msgspec.Struct, forbid_unknown_fields=True):
    prompt: str
    max_new_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    grammar: Grammar | None = None
    seed: int | None = None
    stream: bool = False
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    images: list[Any] | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    options: dict[str, Any] | None = None
    routing_key: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    lora_adapter: str | None = None


class ContentPart(msgspec.Struct, forbid_unknown_fields=True):
    type: str
    text: str | None = None
    image_url: Any = None
    video_url: Any = None


class ChatMessage(msgspec.Struct, forbid_unknown_fields=True):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[Any] | None = None
    reasoning_content: str | None = None


class JsonSchemaFormat(msgspec.Struct, forbid_unknown_fields=True):
    name: str | None = None
    schema: Any = None
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(msgspec.Struct, forbid_unknown_fields=True):
    """OpenAI's three, and the reference's ``regex`` and ``grammar`` (EBNF), which
    sie-mcp's ``generate_structured`` passes through."""

    type: Literal["text", "json_object", "json_schema", "regex", "grammar"]
    json_schema: JsonSchemaFormat | None = None
    regex: str | None = None
    grammar: str | None = None
    syntax: Literal["ebnf"] | None = None


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class ChatBody(msgspec.Struct, forbid_unknown_fields=True):
    model: str
    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    seed: int | None = None
    n: int | None = None
    best_of: int | None = None
    user: str | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: dict[str, float] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    safety_identifier: str | None = None
    lora_adapter: str | None = None
    include_reasoning: bool | None = None


class CompletionsBody(msgspec.Struct, forbid_unknown_fields=True):
    model: str
    prompt: str | list[str]
    max_tokens: int | None = 16
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = None
    n: int | None = None
    best_of: int | None = None
    echo: bool | None = None
    suffix: str | None = None
    user: str | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logprobs: int | None = None
    logit_bias: dict[str, float] | None = None


class ResponseInputMessage(msgspec.Struct, forbid_unknown_fields=True):
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[ContentPart]
    type: Literal["message"] | None = None


class ResponsesBody(msgspec.Struct, forbid_unknown_fields=True):
    model: str
    input: str | list[ResponseInputMessage]
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None


T = TypeVar("T")


def decode_body(raw: Buffer, schema: type[T]) -> T:
    """The JSON body as ``schema``; any mismatch an ``InvalidInput`` naming the field."""
    if len(raw) == 0 or bytes(raw).isspace():
        raise InvalidInput("The request body is empty; send a JSON object.")
    try:
        return msgspec.json.decode(raw, type=schema)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        message = f"Invalid request body: {exc}"
        raise InvalidInput(message, param=top_field(message)) from exc
