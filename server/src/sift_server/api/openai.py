"""OpenAI-compatible ``POST /v1/embeddings`` (API.md §5).

The body is read by hand (bounded by the body limit and the body timeout, like
the native routes) and decoded with msgspec by the serving core
(``core.embeddings``), so every malformed body gets the OpenAI error envelope
with a 400 instead of FastAPI's 422 ``{"detail": [...]}``. The pydantic model
below only documents the body in ``/openapi.json``.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from sift_server.api.respond import respond
from sift_server.core.embeddings import EmbeddingsBody
from sift_server.core.endpoints import EMBEDDINGS

__all__ = ["OPENAPI_BODY", "EmbeddingsBody", "router"]

router = APIRouter()


class EmbeddingsSchema(BaseModel):
    """The body for the OpenAPI document (not used to decode)."""

    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None


OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": EmbeddingsSchema.model_json_schema()}},
    }
}


@router.post("/v1/embeddings", summary="OpenAI-compatible embeddings", openapi_extra=OPENAPI_BODY)
async def embeddings(request: Request) -> Response:
    return await respond(request, request.app.state.sift, EMBEDDINGS, "")
