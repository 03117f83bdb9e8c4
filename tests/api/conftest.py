"""Fixtures of the in-process API tests (see inprocess.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sift_server.api.app import create_app
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.registry.catalog import Catalog
from tests.api.inprocess import Client, MakeClient
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry


@pytest.fixture(scope="module")
def tiny_catalog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny-bad-input")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "model"))
    return catalog


@pytest.fixture
async def make_client(tiny_catalog_dir: Path) -> AsyncIterator[MakeClient]:
    """Builds an in-process app with setting overrides; closes them all at the end."""
    stack: list[Any] = []

    async def make(**overrides: Any) -> Client:
        settings = Settings(default_model=TINY_EMBEDDER, catalog=[tiny_catalog_dir], torch_threads=1, **overrides)
        state = build_state(settings, catalog=Catalog.from_dirs([tiny_catalog_dir], include_shipped=False))
        app = create_app(state)
        lifespan = app.lifespan()
        await lifespan.__aenter__()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sift")
        stack.append((client, lifespan))
        return client, state

    yield make
    for client, lifespan in reversed(stack):
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def app_client(make_client: MakeClient) -> Client:
    return await make_client()
