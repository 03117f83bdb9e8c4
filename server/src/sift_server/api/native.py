"""The SIE v1 native routes: encode, score, extract (the work is the serving
core's: ``core.serve``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sift_server.api.respond import respond
from sift_server.core.endpoints import ENCODE, EXTRACT, SCORE, native_route
from sift_server.core.state import ServerState

router = APIRouter()


async def serve_native(scope: Scope, receive: Receive, send: Send, state: ServerState) -> bool:
    """Answer a native POST straight from the ASGI scope, without FastAPI's
    routing, dependency solving and exception-middleware layers (about a fifth
    of the event loop's time per request on a small model). The routes below
    stay registered (OpenAPI, other methods' 405) and run the same ``respond``.
    Returns False when the scope is not a native POST (nothing was sent)."""
    if scope["method"] != "POST":
        return False
    target = native_route(scope["path"])
    if target is None:
        return False
    endpoint, model = target
    response = await respond(Request(scope, receive), state, endpoint, model)
    await response(scope, receive, send)
    return True


# Reached through FastAPI only where the front door's NativeRoutes layer
# (serve_native) is not in front.
@router.post("/v1/encode/{model:path}", summary="Embed items (dense vectors)")
async def encode_route(request: Request, model: str) -> Response:
    return await respond(request, request.app.state.sift, ENCODE, model)


@router.post("/v1/score/{model:path}", summary="Rerank items against a query")
async def score_route(request: Request, model: str) -> Response:
    return await respond(request, request.app.state.sift, SCORE, model)


@router.post("/v1/extract/{model:path}", summary="Extract entities or classes from items")
async def extract_route(request: Request, model: str) -> Response:
    return await respond(request, request.app.state.sift, EXTRACT, model)
