"""The OpenAI route runs the native encode path: the same task check (before
any load), the same worker lookup, and ``dimensions`` checked against the
loaded model's width."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.inprocess import Client, assert_native, assert_openai
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

RERANKER = "tiny/reranker-only"


@pytest.fixture(scope="module")
def tiny_catalog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The API tests' catalog (see conftest.py) with a model that has no encode task."""
    root = tmp_path_factory.mktemp("tiny-openai")
    catalog = root / "catalog"
    model = build_tiny_embedder(root / "model")
    write_catalog_entry(catalog, model)
    # Never loaded by these tests.
    (catalog / "reranker.yaml").write_text(
        f"name: {RERANKER}\nadapter: cross-encoder\nsource:\n  path: {model}\ntasks: [score]\n"
    )
    return catalog


async def test_a_model_without_encode_is_refused_in_openai_words_without_loading(
    app_client: Client,
) -> None:
    http, state = app_client
    response = await http.post("/v1/embeddings", json={"model": RERANKER, "input": "a"})
    assert_openai(response, 400, "invalid_request")
    error = response.json()["error"]
    assert error["param"] == "model"
    assert error["message"] == f"Model '{RERANKER}' does not produce embeddings."
    assert state.registry.records[RERANKER].state == "available"


async def test_native_encode_checks_the_task_before_loading(app_client: Client) -> None:
    http, state = app_client
    response = await http.post(f"/v1/encode/{RERANKER}", json={"items": [{"text": "a"}]})
    assert_native(response, 400, "INVALID_INPUT")
    assert "does not support encode" in response.json()["detail"]["message"]
    assert state.registry.records[RERANKER].state == "available"


async def test_dimensions_must_be_the_models_width(app_client: Client) -> None:
    http, state = app_client
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
