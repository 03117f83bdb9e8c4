"""The decoder embedder and the LLM reranker through a real ``sift serve`` over HTTP:
every parity case's answer equals the reference's recorded one (tests/adapters/parity)
within 1e-5, ``/v1/models`` says what each model reads and returns, and what a model
cannot take is a clear 4xx."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.adapters.parity.decoder_cases import (
    EMBED_CASES,
    EMBEDDER,
    RERANKER,
    SCORE_CASES,
    embedder_entry,
    reranker_entry,
)
from tests.adapters.parity.decoder_compare import TOL, encode_body, recorded, score_body
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_decoder import HIDDEN, build_tiny_qwen3_embedder, build_tiny_qwen3_reranker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("decoder-family")
    catalog = root / "catalog"
    catalog.mkdir()
    embedder = build_tiny_qwen3_embedder(root / "embedder")
    reranker = build_tiny_qwen3_reranker(root / "reranker")
    (catalog / "embedder.yaml").write_text(f"name: {EMBEDDER}\n{embedder_entry(str(embedder))}")
    (catalog / "reranker.yaml").write_text(f"name: {RERANKER}\n{reranker_entry(str(reranker))}")
    proc = start_server(
        ["--catalog", str(catalog), "--model", EMBEDDER, "--preload", RERANKER, "--no-calibrate"],
        root / "serve.log",
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers={"Accept": "application/json"}) as client:
        yield client


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_equals_the_reference(client: httpx.Client, case: dict[str, Any]) -> None:
    response = client.post(f"/v1/encode/{EMBEDDER}", json=encode_body(case))
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    expected = np.asarray(recorded()["embed"][case["name"]])
    assert [item["dense"]["dims"] for item in items] == [expected.shape[1]] * len(items)
    got = np.asarray([item["dense"]["values"] for item in items])
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_equals_the_reference(client: httpx.Client, case: dict[str, Any]) -> None:
    response = client.post(f"/v1/score/{RERANKER}", json=score_body(case))
    assert response.status_code == 200, response.text
    scores = response.json()["scores"]
    by_item = sorted(scores, key=lambda s: int(s["item_id"]))
    expected = recorded()["score"][case["name"]]
    np.testing.assert_allclose([s["score"] for s in by_item], expected, atol=TOL, rtol=0)
    assert [s["item_id"] for s in scores] == [str(i) for i in np.argsort(expected)[::-1]]


def test_models_says_what_each_reads_and_returns(client: httpx.Client) -> None:
    models = {model["name"]: model for model in client.get("/v1/models").json()["models"]}
    embedder, reranker = models[EMBEDDER], models[RERANKER]
    assert (embedder["inputs"], embedder["outputs"], embedder["dims"]) == (["text"], ["dense"], {"dense": HIDDEN})
    assert (reranker["inputs"], reranker["outputs"], reranker["tasks"]) == (["text"], ["score"], ["score"])
    assert embedder["runtime"]["backend"] == "torch"


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        (f"/v1/encode/{EMBEDDER}", {"items": [{"text": "a"}], "params": {"options": {"dimensions": 4}}}, 400),
        (f"/v1/score/{EMBEDDER}", {"query": {"text": "q"}, "items": [{"text": "a"}]}, 400),
        (f"/v1/encode/{RERANKER}", {"items": [{"text": "a"}]}, 400),
        (
            f"/v1/encode/{EMBEDDER}",
            {"items": [{"text": "word " * 200}], "params": {"options": {"overflow_policy": "error"}}},
            400,
        ),
    ],
    ids=["bad-dimensions", "score-on-embedder", "encode-on-reranker", "too-long"],
)
def test_what_a_model_cannot_take_is_a_4xx(client: httpx.Client, path: str, body: dict[str, Any], code: int) -> None:
    response = client.post(path, json=body)
    assert response.status_code == code, response.text
    assert response.json()["detail"]["code"] in ("INVALID_INPUT", "INPUT_TOO_LONG", "TASK_NOT_SUPPORTED")
