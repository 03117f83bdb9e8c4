"""Probes (text/plain, as the reference) and Prometheus metrics; their OpenAPI
entries are written in api/openapi_contract.py."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from sift_server.core.state import ServerState

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz() -> Response:
    return PlainTextResponse("ok")


@router.get("/livez", include_in_schema=False)
async def livez() -> Response:
    return PlainTextResponse("ok")


@router.get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> Response:
    state: ServerState = request.app.state.sift
    if state.ready and not state.draining:
        return PlainTextResponse("ok")
    return PlainTextResponse("not ready", status_code=503)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    state: ServerState = request.app.state.sift
    for name, record in state.registry.records.items():
        if record.engine is not None:
            state.metrics.queue_depth.labels(name).set(record.engine.queued_items)
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/", include_in_schema=False)
async def root() -> Response:
    return RedirectResponse("/docs", status_code=307)
