"""Sparse encode (and the other hybrid-search outputs) end to end on tiny locally
built models (served by the e2e group's ``server``, tests/e2e/tiny_tasks.py): our SDK,
a raw msgpack check, the model listing, and parity with the reference library through
the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest

from sift_sdk import SiftClient
from tests.e2e.tiny_tasks import COLBERT, HYBRID_TEXTS, SPARSE, TaskModels
from tests.fixtures.server_process import ServerProcess

MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
TEXTS = HYBRID_TEXTS


@pytest.fixture
def models(task_models: TaskModels) -> dict[str, Path]:
    return task_models.folders


@pytest.fixture
def colbert_reference(task_models: TaskModels) -> dict[str, Any]:
    return task_models.colbert_reference


def nd(value: dict[bytes, Any]) -> np.ndarray:
    return np.frombuffer(value[b"data"], dtype=np.dtype(value[b"type"])).reshape(value[b"shape"])


def test_listing_shows_sparse(server: ServerProcess) -> None:
    info = httpx.get(server.url + f"/v1/models/{SPARSE}").json()
    assert info["outputs"] == ["sparse"]
    assert info["dims"]["sparse"] == 30522


def test_sparse_over_raw_msgpack_matches_the_library(server: ServerProcess, models: dict[str, Path]) -> None:
    from sentence_transformers import SparseEncoder

    body = {
        "items": [{"text": t} for t in TEXTS],
        "params": {"output_types": ["sparse"], "options": {"is_query": True}},
    }
    response = httpx.post(server.url + f"/v1/encode/{SPARSE}", content=msgpack.packb(body), headers=MSGPACK)
    assert response.status_code == 200, response.text
    items = msgpack.unpackb(response.content)["items"]
    reference = SparseEncoder(str(models[SPARSE]), device="cpu", local_files_only=True)
    expected = reference.encode_query(TEXTS, convert_to_sparse_tensor=False).numpy()
    for item, row in zip(items, expected, strict=True):
        assert set(item) == {"sparse"}
        sparse = item["sparse"]
        assert sparse["dims"] == 30522 and sparse["dtype"] == "float32"
        assert set(sparse["indices"]) == {b"nd", b"type", b"kind", b"shape", b"data"}
        indices, values = nd(sparse["indices"]), nd(sparse["values"])
        assert indices.dtype == np.int32 and values.dtype == np.float32
        assert np.array_equal(indices, np.flatnonzero(row))
        np.testing.assert_allclose(values, row[indices], atol=1e-5, rtol=0)


def test_sdk_sparse_and_float16(server: ServerProcess) -> None:
    with SiftClient(server.url) as client:
        result = client.encode_full(SPARSE, TEXTS, output_types=["sparse"], output_dtype="float16")
        plain = client.encode_full(SPARSE, TEXTS, output_types=["sparse"])
    for item, other in zip(result.items, plain.items, strict=True):
        sparse = item["sparse"]
        assert sparse["values"].dtype == np.float16 and len(sparse["indices"]) == len(sparse["values"])
        assert np.array_equal(sparse["indices"], other["sparse"]["indices"])
        assert "dense" not in item


def test_json_sparse_and_unsupported_outputs(server: ServerProcess) -> None:
    url = server.url + f"/v1/encode/{SPARSE}"
    body = {"items": [{"text": "x"}], "params": {"output_types": ["sparse"]}}
    item = httpx.post(url, json=body, headers={"Accept": "application/json"}).json()["items"][0]
    assert isinstance(item["sparse"]["indices"], list) and len(item["sparse"]["indices"]) == len(
        item["sparse"]["values"]
    )
    for wrong in (["dense"], ["multivector"], ["sparse", "dense"], None):
        params = {"output_types": wrong} if wrong else {}  # None: the contract's default, dense
        response = httpx.post(url, json={"items": [{"text": "x"}], "params": params})
        assert response.status_code == 400
        assert response.json()["detail"]["code"] == "INVALID_INPUT"
    openai = httpx.post(server.url + "/v1/embeddings", json={"model": SPARSE, "input": ["x"]})
    assert openai.status_code == 400 and "dense" in openai.json()["error"]["message"]


def test_listing_shows_multivector_and_score(server: ServerProcess) -> None:
    info = httpx.get(server.url + f"/v1/models/{COLBERT}").json()
    assert info["outputs"] == ["multivector", "score"]
    assert info["dims"]["multivector"] == 16


def test_multivector_over_the_wire_matches_pylate(server: ServerProcess, colbert_reference: dict[str, Any]) -> None:
    url = server.url + f"/v1/encode/{COLBERT}"
    body = {"items": [{"text": t} for t in TEXTS], "params": {"output_types": ["multivector"]}}
    items = msgpack.unpackb(httpx.post(url, content=msgpack.packb(body), headers=MSGPACK).content)["items"]
    for item, expected in zip(items, colbert_reference["documents"], strict=True):
        multi = item["multivector"]
        values = nd(multi["values"])
        assert values.shape == (multi["num_tokens"], multi["token_dims"]) == expected.shape
        np.testing.assert_allclose(values, expected, atol=1e-5, rtol=0)
    with SiftClient(server.url) as client:
        [query] = client.encode_full(COLBERT, TEXTS[:1], output_types=["multivector"], is_query=True).items
        half = client.encode_full(COLBERT, TEXTS[:1], output_types=["multivector"], output_dtype="float16").items[0]
    np.testing.assert_allclose(query["multivector"], colbert_reference["queries"][0], atol=1e-5, rtol=0)
    assert query["multivector"].shape == (10, 16) and half["multivector"].dtype == np.float16


def test_maxsim_score_over_the_wire(server: ServerProcess, colbert_reference: dict[str, Any]) -> None:
    with SiftClient(server.url) as client:
        result = client.score(
            COLBERT, {"id": "q", "text": TEXTS[0]}, [{"id": "a", "text": TEXTS[0]}, {"id": "b", "text": TEXTS[1]}]
        )
    expected = dict(zip(["a", "b"], colbert_reference["scores"][0], strict=True))
    assert [e.rank for e in result.scores] == [0, 1]
    assert [e.item_id for e in result.scores] == sorted(expected, key=lambda k: -expected[k])
    for entry in result.scores:
        assert abs(entry.score - expected[entry.item_id]) < 1e-4
