"""Two small models whose sum exceeds --memory-budget-mb take turns over HTTP: each
waiting client hears what is happening (MODEL_LOADING or RESOURCE_EXHAUSTED) with a
Retry-After, and both models are served (registry/residency.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from sift_server.api.app import create_app
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.core.state import ServerState
from sift_server.registry.catalog import Catalog
from tests.api.inprocess import JSON_HEADERS, assert_native, assert_openai
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

TWIN = "tiny/twin"
BUDGET_MB = 6  # the tiny embedder measures about 4 MB: one fits, two do not
WAITING = {"MODEL_LOADING", "RESOURCE_EXHAUSTED"}


@pytest.fixture(scope="module")
def two_entries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model-turns")
    model = build_tiny_embedder(root / "model")
    write_catalog_entry(root / "catalog", model)
    write_catalog_entry(root / "catalog", model, name=TWIN)
    return root / "catalog"


@pytest.fixture
async def served(two_entries: Path) -> AsyncIterator[tuple[httpx.AsyncClient, ServerState]]:
    settings = Settings(
        default_model=TINY_EMBEDDER,
        catalog=[two_entries],
        torch_threads=1,
        memory_budget_mb=BUDGET_MB,
        # Long turns: a model gives way here only once it has no clients (no use for
        # 2 s, nobody due back), so what each waiter hears does not depend on speed.
        min_turn_s=600,
        evict_idle_s=2.0,
    )
    state = build_state(settings, catalog=Catalog.from_dirs([two_entries], include_shipped=False))
    app = create_app(state)
    lifespan = app.lifespan()
    await lifespan.__aenter__()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sift")
    try:
        yield client, state
    finally:
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


async def encode(client: httpx.AsyncClient, model: str) -> httpx.Response:
    return await client.post(f"/v1/encode/{model}", json={"items": [{"text": "turns"}]}, headers=JSON_HEADERS)


async def until_served(client: httpx.AsyncClient, model: str, codes: list[str]) -> None:
    """Retry after each 503's Retry-After, as the SDK does (a few turns at most)."""
    for _ in range(8):
        response = await encode(client, model)
        if response.status_code == 200:
            return
        code = response.json()["detail"]["code"]
        assert_native(response, 503, code)
        assert code in WAITING
        retry_after = int(response.headers["Retry-After"])
        assert 1 <= retry_after <= 15
        codes.append(code)
        await asyncio.sleep(retry_after)
    raise AssertionError(f"{model} was not served after 8 tries: {codes}")


async def test_two_models_over_the_budget_take_turns_and_each_waiter_hears_why(
    served: tuple[httpx.AsyncClient, ServerState],
) -> None:
    client, state = served
    size = state.registry.records[TINY_EMBEDDER].memory_bytes
    assert BUDGET_MB * 2**20 / 2 < size <= BUDGET_MB * 2**20  # one fits, two do not
    assert (await encode(client, TINY_EMBEDDER)).status_code == 200
    # The default model was just used (it keeps its turn): the twin waits for its memory.
    waiting = await encode(client, TWIN)
    assert_native(waiting, 503, waiting.json()["detail"]["code"])
    assert waiting.json()["detail"]["code"] == "RESOURCE_EXHAUSTED", waiting.text
    assert f"'{TINY_EMBEDDER}'" in waiting.json()["detail"]["message"]
    assert int(waiting.headers["Retry-After"]) >= 1
    openai = await client.post("/v1/embeddings", json={"model": TWIN, "input": "turns"}, headers=JSON_HEADERS)
    assert_openai(openai, 503, "resource_exhausted")
    assert int(openai.headers["Retry-After"]) >= 1
    codes: list[str] = []
    await until_served(client, TWIN, codes)
    assert state.registry.records[TINY_EMBEDDER].state == "available"  # it gave way
    await until_served(client, TINY_EMBEDDER, codes)
    assert state.registry.records[TWIN].state == "available"
    states = {m["name"]: m["state"] for m in (await client.get("/v1/models")).json()["models"]}
    assert states == {TINY_EMBEDDER: "loaded", TWIN: "available"}
    assert set(codes) <= WAITING and state.registry.evictions >= 2
