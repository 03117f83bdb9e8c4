"""The SIE v1 native routes: encode, score, extract (the work is the serving
core's: ``core.serve``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sift_server.api.respond import answer, respond, send_reply
from sift_server.core.endpoints import ENCODE, EXTRACT, SCORE, route
from sift_server.core.state import ServerState

router = APIRouter()


async def serve_native(scope: Scope, receive: Receive, send: Send, state: ServerState) -> bool:
    """Answer a work POST (native or OpenAI) straight from the ASGI scope, without
    FastAPI's routing, dependency solving and exception-middleware layers or
    Starlette's request and response objects. The routes stay registered
    (OpenAPI, other methods' 405) and give the same answers through ``respond``.
    Returns False when the scope is not a work POST (nothing was sent)."""
    if scope["method"] != "POST":
        return False
    target = route(scope["path"])
    if target is None:
        return False
    endpoint, model = target
    await send_reply(send, await answer(state, endpoint, model, scope, receive))
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
