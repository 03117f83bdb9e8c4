"""Named profiles (API.md §1.1, §2.1): a catalog entry's runtime-option sets, chosen by path
(``model:profile``) or by ``options.profile``, merged under the request's own options as
sie-server 0.10.1 merges them (core/runtime_options.py there), and listed in ``/v1/models``."""

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
from tests.api.inprocess import JSON_HEADERS, assert_native, assert_openai
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

PROFILES = """profiles:
  half:
    options:
      output_dtype: float16
  binary:
    options:
      output_dtype: binary
"""


@pytest.fixture(scope="module")
def profiled_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("profiles")
    entry = write_catalog_entry(root / "catalog", build_tiny_embedder(root / "model"))
    entry.write_text(entry.read_text() + PROFILES)
    return root / "catalog"


@pytest.fixture
async def client(profiled_catalog: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(default_model=TINY_EMBEDDER, catalog=[profiled_catalog], torch_threads=1)
    state = build_state(settings, catalog=Catalog.from_dirs([profiled_catalog], include_shipped=False))
    app = create_app(state)
    lifespan = app.lifespan()
    await lifespan.__aenter__()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sift") as http:
        yield http
    await lifespan.__aexit__(None, None, None)


async def encode(client: httpx.AsyncClient, model: str, params: dict[str, Any] | None = None) -> httpx.Response:
    body: dict[str, Any] = {"items": [{"text": "hello profiles"}]}
    if params is not None:
        body["params"] = params
    return await client.post(f"/v1/encode/{model}", json=body, headers=JSON_HEADERS)


async def dense_dtype(client: httpx.AsyncClient, model: str, params: dict[str, Any] | None = None) -> str:
    response = await encode(client, model, params)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == model
    return str(response.json()["items"][0]["dense"]["dtype"])


async def test_profile_by_path_and_by_option(client: httpx.AsyncClient) -> None:
    assert await dense_dtype(client, TINY_EMBEDDER) == "float32"
    assert await dense_dtype(client, f"{TINY_EMBEDDER}:half") == "float16"
    assert await dense_dtype(client, TINY_EMBEDDER, {"options": {"profile": "half"}}) == "float16"
    assert await dense_dtype(client, TINY_EMBEDDER, {"options": {"profile": "default"}}) == "float32"
    # On a model:profile path, 'default' is that profile (the reference's variant entry).
    assert await dense_dtype(client, f"{TINY_EMBEDDER}:binary", {"options": {"profile": "default"}}) == "binary"


async def test_request_options_win_over_the_profile(client: httpx.AsyncClient) -> None:
    options = {"profile": "half", "output_dtype": "int8"}
    assert await dense_dtype(client, TINY_EMBEDDER, {"options": options}) == "int8"
    assert await dense_dtype(client, f"{TINY_EMBEDDER}:half", {"options": {"output_dtype": "float32"}}) == "float32"
    # params.output_dtype wins over options, the profile's included.
    assert await dense_dtype(client, f"{TINY_EMBEDDER}:half", {"output_dtype": "uint8"}) == "uint8"


async def test_unknown_profile_by_option_is_400_naming_the_profiles(client: httpx.AsyncClient) -> None:
    response = await encode(client, TINY_EMBEDDER, {"options": {"profile": "sparse"}})
    assert_native(response, 400, "INVALID_INPUT")
    assert response.json()["detail"]["message"] == (
        f"Unknown profile 'sparse'; model '{TINY_EMBEDDER}' has the profiles default, half, binary."
    )
    for bad in (3, "", "  "):
        assert_native(await encode(client, TINY_EMBEDDER, {"options": {"profile": bad}}), 400, "INVALID_INPUT")


async def test_path_and_option_may_not_name_two_profiles(client: httpx.AsyncClient) -> None:
    response = await encode(client, f"{TINY_EMBEDDER}:half", {"options": {"profile": "binary"}})
    assert_native(response, 400, "INVALID_INPUT")
    assert "has only the 'default' profile" in response.json()["detail"]["message"]
    response = await encode(client, f"{TINY_EMBEDDER}:half", {"options": {"profile": "half"}})
    assert_native(response, 400, "INVALID_INPUT")


async def test_unknown_profile_in_the_path_is_an_unknown_model(client: httpx.AsyncClient) -> None:
    # As the reference: only the entries and their {id}:{profile} entries are model ids.
    for model in (f"{TINY_EMBEDDER}:nope", f"{TINY_EMBEDDER}:default"):
        response = await encode(client, model)
        assert_native(response, 404, "MODEL_NOT_FOUND")
        assert f"Model '{model}' not found." in response.json()["detail"]["message"]


async def test_models_lists_each_profile_as_its_own_entry(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/v1/models")).json()["models"]
    by_name = {info["name"]: info for info in listed}
    assert sorted(by_name) == sorted([TINY_EMBEDDER, f"{TINY_EMBEDDER}:binary", f"{TINY_EMBEDDER}:half"])
    base = by_name[TINY_EMBEDDER]["profiles"]
    assert {name: info["is_default"] for name, info in base.items()} == {
        "default": True,
        "half": False,
        "binary": False,
    }
    variant = by_name[f"{TINY_EMBEDDER}:half"]
    assert list(variant["profiles"]) == ["default"] and variant["profiles"]["default"]["is_default"]
    assert variant["tasks"] == ["encode"] and variant["dims"] == by_name[TINY_EMBEDDER]["dims"]
    one = await client.get(f"/v1/models/{TINY_EMBEDDER}:half")
    assert one.status_code == 200 and one.json() == variant
    assert (await client.get(f"/v1/models/{TINY_EMBEDDER}:nope")).status_code == 404


async def test_openai_embeddings_take_a_profile_in_the_model(client: httpx.AsyncClient) -> None:
    body = {"model": f"{TINY_EMBEDDER}:half", "input": "hello"}
    response = await client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == f"{TINY_EMBEDDER}:half"
    assert_openai(
        await client.post("/v1/embeddings", json={"model": f"{TINY_EMBEDDER}:nope", "input": "x"}),
        404,
        "model_not_found",
    )
