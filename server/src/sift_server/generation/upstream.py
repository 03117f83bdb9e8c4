"""What Sift sends to an operator's OpenAI-compatible upstream and how it reads the
answer: plain data and plain rules, no HTTP (the shell is remote.py; unit-tested in
tests/generation/test_upstream.py).

The upstream streams every answer (``stream: true`` with usage in its last chunk):
one reader serves streamed and whole answers alike, and usage is the upstream's own
count, as the reference's remote profiles report it. The upstream is outside Sift,
so its bytes are untrusted: a chunk that is not the OpenAI shape ends the answer with
an ``UpstreamError``, and error messages quote the upstream only briefly."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from sift_server.errors import SiftError, UpstreamBusy, UpstreamError, UpstreamRejected

Endpoint = Literal["chat", "completions"]
PATHS: dict[Endpoint, str] = {"chat": "/chat/completions", "completions": "/completions"}
# The most of an upstream's own error message an answer repeats.
QUOTED_CHARS = 300


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """One call: the upstream endpoint and the validated fields Sift forwards
    (``model``, ``stream`` and ``stream_options`` are added when it is sent)."""

    endpoint: Endpoint
    fields: dict[str, Any]

    def body(self, upstream_model: str) -> dict[str, Any]:
        return {
            **self.fields,
            "model": upstream_model,
            "stream": True,
            "stream_options": {"include_usage": True},
        }


@dataclass(frozen=True, slots=True)
class UpstreamPiece:
    """One chunk's worth: new text, the finish reason on the chunk that has one,
    the usage on the chunk that carries it."""

    text: str = ""
    finish: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


DONE = UpstreamPiece(finish="[DONE]")


class SseEvents:
    """Server-sent events from lines: each event's joined ``data`` once its blank line arrives."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        if line == "":
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return data
        if line.startswith(":"):  # a comment (keep-alive)
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def end(self) -> str | None:
        """An event the stream ended without its blank line."""
        return self.feed("")


def _quoted(text: str) -> str:
    printable = "".join(c if c.isprintable() else " " for c in text).strip()
    return printable if len(printable) <= QUOTED_CHARS else printable[:QUOTED_CHARS] + "..."


def _error_message(payload: Any) -> str:
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail"))
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _quoted(error["message"])
        if isinstance(error, str):
            return _quoted(error)
    return ""


def read_event(data: str, endpoint: Endpoint) -> UpstreamPiece:
    """One event's data as a piece (``DONE`` for ``[DONE]``); an error event or a
    chunk not in the OpenAI shape raises ``UpstreamError``."""
    if data.strip() == "[DONE]":
        return DONE
    try:
        chunk = json.loads(data)
    except ValueError:
        raise UpstreamError("The upstream sent an event that is not JSON.") from None
    if not isinstance(chunk, dict):
        raise UpstreamError("The upstream sent an event that is not a JSON object.")
    if "error" in chunk:
        said = _error_message(chunk)
        raise UpstreamError("The upstream failed mid-answer" + (f": {said}" if said else "."))
    usage = chunk.get("usage")
    prompt_tokens = completion_tokens = None
    if isinstance(usage, dict):
        prompt_tokens, completion_tokens = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        raise UpstreamError("The upstream sent a chunk without 'choices'.")
    if not choices:
        return UpstreamPiece(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise UpstreamError("The upstream sent a choice that is not an object.")
    text = _choice_text(choice, endpoint)
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise UpstreamError("The upstream sent a finish_reason that is not a string.")
    return UpstreamPiece(text, finish, prompt_tokens, completion_tokens)


def _choice_text(choice: dict[str, Any], endpoint: Endpoint) -> str:
    if endpoint == "completions":
        text = choice.get("text")
    else:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            raise UpstreamError("The upstream sent a chat chunk without 'delta'.")
        text = delta.get("content")
    if text is None:
        return ""
    if not isinstance(text, str):
        raise UpstreamError("The upstream sent text that is not a string.")
    return text


def _count(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def status_error(status: int, body: bytes) -> SiftError:
    """The answer for an upstream that refused the call with ``status``.

    The request itself (400, 413, 422: e.g. a prompt over the upstream's context)
    is the caller's to fix: a 400 quoting the upstream. 429 is a retryable 503.
    Anything else (5xx, or 401/403/404: the operator's key or model id is wrong)
    is a 502: the caller cannot fix it."""
    try:
        said = _error_message(json.loads(body)) if body else ""
    except ValueError:
        said = ""
    suffix = f": {said}" if said else "."
    if status in (400, 413, 422):
        return UpstreamRejected(f"The upstream refused the request ({status}){suffix}")
    if status == 429:
        return UpstreamBusy(f"The upstream is busy (429){suffix} Retry shortly.")
    if status in (401, 403):
        return UpstreamError(f"The upstream refused Sift's credentials ({status}); the operator must check its key.")
    return UpstreamError(f"The upstream failed ({status}){suffix}")
