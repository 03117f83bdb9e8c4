"""The one table of the API's work endpoints: which paths carry work, the body
each decodes to and its error family. ``sift serve``'s routes, its front door,
the cluster gateway and the cluster worker all read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from sift_server.core.embeddings import EmbeddingsBody
from sift_server.core.envelopes import OPENAI_PATH
from sift_server.wire.schemas import EncodeBody, ExtractBody, ScoreBody

Family = Literal["native", "openai"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # encode, score, extract, embeddings (also the metrics' endpoint label)
    path: str  # native: the prefix before the model; OpenAI: the whole path
    schema: type[msgspec.Struct]
    family: Family


ENCODE = Endpoint("encode", "/v1/encode/", EncodeBody, "native")
SCORE = Endpoint("score", "/v1/score/", ScoreBody, "native")
EXTRACT = Endpoint("extract", "/v1/extract/", ExtractBody, "native")
EMBEDDINGS = Endpoint("embeddings", OPENAI_PATH, EmbeddingsBody, "openai")

NATIVE: tuple[Endpoint, ...] = (ENCODE, SCORE, EXTRACT)
NATIVE_PREFIXES: tuple[str, ...] = tuple(endpoint.path for endpoint in NATIVE)
BY_NAME: dict[str, Endpoint] = {endpoint.name: endpoint for endpoint in (*NATIVE, EMBEDDINGS)}


def native_route(path: str) -> tuple[Endpoint, str] | None:
    """The native endpoint a path addresses and its model (the rest of the path)."""
    for endpoint in NATIVE:
        if path.startswith(endpoint.path):
            return endpoint, path[len(endpoint.path) :]
    return None


def route(path: str) -> tuple[Endpoint, str] | None:
    """Any work endpoint (native or OpenAI) a path addresses, and the model the path
    names ("" on the OpenAI route: its model is in the body)."""
    if path == OPENAI_PATH:
        return EMBEDDINGS, ""
    return native_route(path)
