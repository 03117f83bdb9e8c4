"""The one table of the API's work endpoints: the path each is served on, the body
it decodes to, its error family and its OpenAPI summary. Every work route's path
is written here and only here: ``sift serve`` and the gateway build their work
routes from it (api/work.py), their OpenAPI entries are generated from it
(api/openapi.py), and the front door, telemetry and the cluster worker find a
path's endpoint with :func:`route` (and its error envelope with
:func:`envelope_for_path`). What runs an endpoint is the serving core's
service table (``core.serve.SERVING``), keyed by the endpoint's name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from sift_server.core.embeddings import EmbeddingsBody
from sift_server.core.envelopes import Envelope, native_envelope, openai_envelope
from sift_server.core.rerank import RerankBody
from sift_server.core.transcriptions import TranscriptionBody
from sift_server.errors import SiftError
from sift_server.generation.wire import ChatBody, CompletionsBody, GenerateBody, ResponsesBody
from sift_server.wire.schemas import EncodeBody, ExtractBody, ScoreBody

Family = Literal["native", "openai"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # encode, score, extract, embeddings, rerank (also the metrics' endpoint label)
    # Ending in "/": a prefix, the model is the rest of the path; else the whole path
    # (the model is named in the body).
    path: str
    schema: type[msgspec.Struct]
    family: Family
    summary: str  # the OpenAPI summary
    # How the body is sent (the OpenAPI entry's request content type).
    media_type: str = "application/json"

    @property
    def model_in_path(self) -> bool:
        return self.path.endswith("/")

    @property
    def template(self) -> str:
        """The path as OpenAPI writes it ("/v1/encode/{model}")."""
        return self.path + "{model}" if self.model_in_path else self.path


ENCODE = Endpoint("encode", "/v1/encode/", EncodeBody, "native", "Embed items (dense vectors)")
SCORE = Endpoint("score", "/v1/score/", ScoreBody, "native", "Rerank items against a query")
EXTRACT = Endpoint("extract", "/v1/extract/", ExtractBody, "native", "Extract entities or classes from items")
EMBEDDINGS = Endpoint("embeddings", "/v1/embeddings", EmbeddingsBody, "openai", "OpenAI-compatible embeddings")

RERANK = Endpoint("rerank", "/v1/rerank", RerankBody, "openai", "Cohere-compatible rerank over any score model")

GENERATE = Endpoint(
    "generate", "/v1/generate/", GenerateBody, "native", "Generate text from a prompt (SSE with stream)"
)
CHAT = Endpoint("chat", "/v1/chat/completions", ChatBody, "openai", "OpenAI-compatible chat completions")
COMPLETIONS = Endpoint(
    "completions", "/v1/completions", CompletionsBody, "openai", "OpenAI-compatible text completions"
)
RESPONSES = Endpoint("responses", "/v1/responses", ResponsesBody, "openai", "OpenAI-compatible responses (text)")

TRANSCRIPTIONS = Endpoint(
    "transcriptions",
    "/v1/audio/transcriptions",
    TranscriptionBody,
    "openai",
    "OpenAI-compatible audio transcription (Whisper)",
    media_type="multipart/form-data",
)

ENDPOINTS: tuple[Endpoint, ...] = (
    ENCODE,
    SCORE,
    EXTRACT,
    EMBEDDINGS,
    RERANK,
    GENERATE,
    CHAT,
    COMPLETIONS,
    RESPONSES,
    TRANSCRIPTIONS,
)

NATIVE: tuple[Endpoint, ...] = tuple(e for e in ENDPOINTS if e.family == "native")
NATIVE_PREFIXES: tuple[str, ...] = tuple(e.path for e in NATIVE if e.model_in_path)
BY_NAME: dict[str, Endpoint] = {e.name: e for e in ENDPOINTS}
_EXACT: dict[str, Endpoint] = {e.path: e for e in ENDPOINTS if not e.model_in_path}
_PREFIXED: tuple[Endpoint, ...] = tuple(e for e in ENDPOINTS if e.model_in_path)


def native_route(path: str) -> tuple[Endpoint, str] | None:
    """The endpoint whose path is a prefix of ``path``, and its model (the rest of the path)."""
    for endpoint in _PREFIXED:
        if path.startswith(endpoint.path):
            return endpoint, path[len(endpoint.path) :]
    return None


def route(path: str) -> tuple[Endpoint, str] | None:
    """Any work endpoint a path addresses, and the model the path names ("" where
    the model is in the body, as on the OpenAI routes)."""
    exact = _EXACT.get(path)
    if exact is not None:
        return exact, ""
    return native_route(path)


def envelope_for_path(path: str, error: SiftError) -> Envelope:
    """``error`` in the envelope of the family of the endpoint a path addresses
    (the native one where it addresses none): for the errors answered before
    any endpoint runs (the front door, routing)."""
    target = route(path)
    if target is not None and target[0].family == "openai":
        return openai_envelope(error)
    return native_envelope(error)
