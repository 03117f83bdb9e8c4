"""The HTTP layer in-process (no sockets) with the tiny embedder: drain gate,
readiness, metrics and the worker's forward count."""

from __future__ import annotations

import asyncio

import httpx

from sift_server.core.state import ServerState
from tests.fixtures.tiny_embedder import TINY_EMBEDDER


async def test_ready_then_draining_refuses_with_retry_after(app_client: tuple[httpx.AsyncClient, ServerState]) -> None:
    client, state = app_client
    assert (await client.get("/readyz")).text == "ok"
    state.draining = True
    ready = await client.get("/readyz")
    assert ready.status_code == 503 and ready.text == "not ready"
    refused = await client.post(f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": "x"}]})
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "5"
    assert refused.json()["detail"]["code"] == "SHUTTING_DOWN"
    assert (await client.get("/healthz")).status_code == 200


async def test_concurrent_requests_fuse_and_metrics_count_forwards(
    app_client: tuple[httpx.AsyncClient, ServerState],
) -> None:
    client, state = app_client
    worker = state.registry.records[TINY_EMBEDDER].engine
    assert worker is not None
    before = worker.forwards_run
    responses = await asyncio.gather(
        *(
            client.post(
                f"/v1/encode/{TINY_EMBEDDER}",
                json={"items": [{"text": f"t{i}"}]},
                headers={"Accept": "application/json"},
            )
            for i in range(16)
        )
    )
    assert all(r.status_code == 200 for r in responses)
    assert worker.forwards_run - before < 16
    metrics = (await client.get("/metrics")).text
    assert f'sift_batch_dispatch_total{{model="{TINY_EMBEDDER}"' in metrics


async def test_root_redirects_to_docs(app_client: tuple[httpx.AsyncClient, ServerState]) -> None:
    client, _ = app_client
    response = await client.get("/")
    assert response.status_code == 307 and response.headers["location"] == "/docs"
    assert (await client.get("/openapi.json")).status_code == 200
