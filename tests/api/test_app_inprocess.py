"""The HTTP layer in-process (no sockets) with the tiny embedder: drain gate,
readiness, metrics and the worker's forward count."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from sift_server.api.app import build_state, create_app
from sift_server.api.state import ServerState
from sift_server.config import Settings
from sift_server.registry.catalog import Catalog
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry


@pytest.fixture(scope="module")
def tiny_catalog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny-inprocess")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "model"))
    return catalog


@pytest.fixture
async def app_client(tiny_catalog_dir: Path) -> AsyncIterator[tuple[httpx.AsyncClient, ServerState]]:
    settings = Settings(default_model=TINY_EMBEDDER, catalog=[tiny_catalog_dir], torch_threads=1)
    state = build_state(settings, catalog=Catalog.from_dirs([tiny_catalog_dir], include_shipped=False))
    app = create_app(state)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sift") as client:
            yield client, state


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
    worker = state.registry.records[TINY_EMBEDDER].worker
    assert worker is not None
    before = worker.forwards_run
    responses = await asyncio.gather(*(
        client.post(f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": f"t{i}"}]},
                    headers={"Accept": "application/json"})
        for i in range(16)
    ))
    assert all(r.status_code == 200 for r in responses)
    assert worker.forwards_run - before < 16
    metrics = (await client.get("/metrics")).text
    assert f'sift_batch_dispatch_total{{model="{TINY_EMBEDDER}"' in metrics


async def test_root_redirects_to_docs(app_client: tuple[httpx.AsyncClient, ServerState]) -> None:
    client, _ = app_client
    response = await client.get("/")
    assert response.status_code == 307 and response.headers["location"] == "/docs"
    assert (await client.get("/openapi.json")).status_code == 200
