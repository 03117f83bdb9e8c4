"""The OpenAI route runs the native encode path: the same task check (before
any load), the same worker lookup, and ``dimensions`` checked against the
loaded model's width."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from sift_server.api.app import build_state, create_app
from sift_server.api.state import ServerState
from sift_server.config import Settings
from sift_server.registry.catalog import Catalog
from tests.api.inprocess import assert_native, assert_openai
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

RERANKER = "tiny/reranker-only"


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny-openai")
    catalog = root / "catalog"
    model = build_tiny_embedder(root / "model")
    write_catalog_entry(catalog, model)
    # A model without the encode task; never loaded by these tests.
    (catalog / "reranker.yaml").write_text(
        f"name: {RERANKER}\nadapter: cross-encoder\nsource:\n  path: {model}\ntasks: [score]\n"
    )
    return catalog


@pytest.fixture
async def client(catalog_dir: Path) -> AsyncIterator[tuple[httpx.AsyncClient, ServerState]]:
    settings = Settings(default_model=TINY_EMBEDDER, catalog=[catalog_dir], torch_threads=1)
    state = build_state(settings, catalog=Catalog.from_dirs([catalog_dir], include_shipped=False))
    app = create_app(state)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://sift") as http:
        yield http, state


async def test_a_model_without_encode_is_refused_in_openai_words_without_loading(
    client: tuple[httpx.AsyncClient, ServerState],
) -> None:
    http, state = client
    response = await http.post("/v1/embeddings", json={"model": RERANKER, "input": "a"})
    assert_openai(response, 400, "invalid_request")
    error = response.json()["error"]
    assert error["param"] == "model"
    assert error["message"] == f"Model '{RERANKER}' does not produce embeddings."
    assert state.registry.records[RERANKER].state == "available"


async def test_native_encode_checks_the_task_before_loading(client: tuple[httpx.AsyncClient, ServerState]) -> None:
    http, state = client
    response = await http.post(f"/v1/encode/{RERANKER}", json={"items": [{"text": "a"}]})
    assert_native(response, 400, "INVALID_INPUT")
    assert "does not support encode" in response.json()["detail"]["message"]
    assert state.registry.records[RERANKER].state == "available"


async def test_dimensions_must_be_the_models_width(client: tuple[httpx.AsyncClient, ServerState]) -> None:
    http, state = client
    adapter = state.registry.records[TINY_EMBEDDER].adapter
    assert adapter is not None
    width = adapter.info.dims["dense"]
    same = await http.post("/v1/embeddings", json={"model": TINY_EMBEDDER, "input": ["a", "b"], "dimensions": width})
    assert same.status_code == 200, same.text
    assert [len(entry["embedding"]) for entry in same.json()["data"]] == [width, width]
    other = await http.post("/v1/embeddings", json={"model": TINY_EMBEDDER, "input": "a", "dimensions": width + 1})
    assert_openai(other, 400, "unsupported_field")
    assert other.json()["error"]["param"] == "dimensions"
    assert other.json()["error"]["message"] == f"dimensions={width + 1} is not supported; this model produces {width}."
