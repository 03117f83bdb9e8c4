"""BGE-M3 through a real ``sift serve`` over HTTP: every parity case's dense, sparse and
multivector answer and every ``score_mode``'s scores equal FlagEmbedding's recorded ones
(tests/adapters/parity) within 1e-5 (sparse token ids exactly), ``/v1/models`` says what
the model reads and returns, and what it cannot take is a clear 4xx."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.adapters.parity.m3_cases import EMBED_CASES, MODEL, SCORE_CASES, entry
from tests.adapters.parity.m3_compare import TOL, assert_item_equals, encode_body, recorded, score_body
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_m3 import HIDDEN, build_tiny_m3, vocab_size


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("m3-family")
    catalog = root / "catalog"
    catalog.mkdir()
    (catalog / "m3.yaml").write_text(f"name: {MODEL}\n{entry(str(build_tiny_m3(root / 'm3')))}")
    proc = start_server(["--catalog", str(catalog), "--model", MODEL, "--no-calibrate"], root / "serve.log")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers={"Accept": "application/json"}) as client:
        yield client


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_equals_the_reference(client: httpx.Client, case: dict[str, Any]) -> None:
    response = client.post(f"/v1/encode/{MODEL}", json=encode_body(case))
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    expected = recorded()["embed"][case["name"]]
    for index, item in enumerate(items):
        assert item["dense"]["dims"] == HIDDEN and item["sparse"]["dims"] == vocab_size()
        assert item["multivector"]["token_dims"] == HIDDEN
        got = {
            "dense": item["dense"]["values"],
            "sparse": (item["sparse"]["indices"], item["sparse"]["values"]),
            "multivector": item["multivector"]["values"],
        }
        assert_item_equals(got, expected, index)


def test_only_the_outputs_asked_for_come_back(client: httpx.Client) -> None:
    body = {"items": [{"text": "Beijing"}], "params": {"output_types": ["sparse"]}}
    (item,) = client.post(f"/v1/encode/{MODEL}", json=body).json()["items"]
    assert set(item) == {"sparse"}
    (item,) = client.post(f"/v1/encode/{MODEL}", json={"items": [{"text": "Beijing"}]}).json()["items"]
    assert set(item) == {"dense"}


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_equals_the_reference(client: httpx.Client, case: dict[str, Any]) -> None:
    response = client.post(f"/v1/score/{MODEL}", json=score_body(case))
    assert response.status_code == 200, response.text
    by_item = sorted(response.json()["scores"], key=lambda s: int(s["item_id"]))
    np.testing.assert_allclose([s["score"] for s in by_item], recorded()["score"][case["name"]], atol=TOL, rtol=0)


def test_models_says_what_it_reads_and_returns(client: httpx.Client) -> None:
    model = client.get(f"/v1/models/{MODEL}").json()
    assert (model["inputs"], model["outputs"], model["tasks"]) == (
        ["text"],
        ["dense", "sparse", "multivector", "score"],
        ["encode", "score"],
    )
    assert model["dims"] == {"dense": HIDDEN, "sparse": vocab_size(), "multivector": HIDDEN}


_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (f"/v1/score/{MODEL}", {"query": {"text": "q"}, "items": [{"text": "a"}], "options": {"score_mode": "x"}}),
        (
            f"/v1/score/{MODEL}",
            {"query": {"text": "q"}, "items": [{"text": "a"}], "options": {"score_weights": {"dense": -1}}},
        ),
        (f"/v1/encode/{MODEL}", {"items": [{"text": "a"}], "params": {"output_types": ["dense", "image"]}}),
        (f"/v1/encode/{MODEL}", {"items": [{"text": "a"}], "params": {"options": {"normalize": "no"}}}),
        (
            f"/v1/encode/{MODEL}",
            {"items": [{"text": "the " * 40}], "params": {"options": {"overflow_policy": "error"}}},
        ),
        (f"/v1/encode/{MODEL}", {"items": [{"images": [{"data": _PNG, "format": "png"}]}]}),
        (f"/v1/extract/{MODEL}", {"items": [{"text": "a"}], "params": {"labels": ["x"]}}),
    ],
    ids=["score-mode", "score-weights", "output-type", "normalize", "too-long", "image", "extract"],
)
def test_what_it_cannot_take_is_a_4xx(client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    response = client.post(path, json=body)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["detail"]["code"] in ("INVALID_INPUT", "INPUT_TOO_LONG", "TASK_NOT_SUPPORTED")
