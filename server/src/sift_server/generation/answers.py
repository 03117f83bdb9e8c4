"""The generation routes' answers as the released sie-sdk (0.10.1) and the OpenAI
client read them: plain dicts from plain values, and the server-sent-event framing
(one ``data: <json>`` line per chunk, ``data: [DONE]`` at the end)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from sift_server.errors import SiftError

DONE = b"data: [DONE]\n\n"


def sse(chunk: dict[str, Any]) -> bytes:
    # msgspec: one event per step and stream; json.dumps was about 5 % of the work per token.
    return b"data: " + msgspec.json.encode(chunk) + b"\n\n"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def error_chunk(error: SiftError, request_id: str) -> dict[str, Any]:
    """A failure after the stream began: the reference's terminal error chunk."""
    return {"request_id": request_id, "error": {"code": error.code, "message": error.message, "param": None}}


# ---- /v1/generate/{model} ----------------------------------------------------


def generate_answer(
    model: str, text: str, finish: str, tokens: dict[str, int], request_id: str, ttft_ms: float, tpot_ms: float
) -> dict[str, Any]:
    return {
        "model": model,
        "text": text,
        "finish_reason": finish,
        "usage": tokens,
        "attempt_id": request_id,
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot_ms,
    }


def generate_chunk(request_id: str, seq: int, delta: str) -> dict[str, Any]:
    return {"request_id": request_id, "seq": seq, "text_delta": delta, "done": False}


def generate_last_chunk(
    request_id: str, seq: int, delta: str, finish: str, tokens: dict[str, int], ttft_ms: float
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "seq": seq,
        "text_delta": delta,
        "done": True,
        "finish_reason": finish,
        "usage": tokens,
        "ttft_ms": ttft_ms,
    }


# ---- /v1/chat/completions --------------------------------------------------------


def chat_answer(
    answer_id: str, created: int, model: str, text: str, finish: str, tokens: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish, "logprobs": None}
        ],
        "usage": tokens,
    }


def chat_chunk(answer_id: str, created: int, model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def usage_chunk(answer_id: str, created: int, model: str, obj: str, tokens: dict[str, int]) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage`` asked for it: no choices."""
    return {"id": answer_id, "object": obj, "created": created, "model": model, "choices": [], "usage": tokens}


# ---- /v1/completions -------------------------------------------------------------


def completion_answer(
    answer_id: str, created: int, model: str, text: str, finish: str | None, tokens: dict[str, int] | None
) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": answer_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
    }
    if tokens is not None:
        answer["usage"] = tokens
    return answer


# ---- /v1/responses ---------------------------------------------------------------


def responses_answer(
    answer_id: str, message_id: str, created: int, model: str, text: str, prompt: int, completion: int
) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "response",
        "created_at": created,
        "model": model,
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": message_id,
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion},
    }


def render(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
