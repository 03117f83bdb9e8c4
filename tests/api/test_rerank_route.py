"""``POST /v1/rerank``: the Cohere-shaped body and answer (core/rerank.py), and the route
over the score service: the same scores as ``/v1/score`` for the same pairs, errors in
the OpenAI envelope (as the reference's route answers them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from sift_server.core.rerank import MAX_DOCUMENTS, parse_rerank, rerank_answer, score_body
from sift_server.errors import InvalidInput
from tests.api.inprocess import Client, MakeClient, assert_openai
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry
from tests.fixtures.tiny_models import build_tiny_cross_encoder

RERANKER = "tiny/rerank-route"
QUERY = "what is a vector database?"
DOCUMENTS = ["A vector database stores embeddings.", "Bananas are yellow.", "Paris is in France."]


async def parsed(body: dict[str, Any]) -> Any:
    return await parse_rerank(msgspec.json.encode(body), "application/json")


async def refused(body: dict[str, Any]) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        await parsed(body)
    return caught.value


async def test_documents_are_strings_or_text_objects() -> None:
    body = await parsed({"model": "m", "query": "q", "documents": ["a", {"text": "b", "title": "t"}]})
    score = score_body(body)
    assert score.query is not None and score.query.text == "q"
    assert score.items is not None
    assert [(item.id, item.text) for item in score.items] == [("0", "a"), ("1", "b")]


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"model": "m", "documents": ["a"]}, "query", "'query' must be a non-empty string"),
        ({"model": "m", "query": "  ", "documents": ["a"]}, "query", "'query' must be a non-empty string"),
        ({"model": "m", "query": "q"}, "documents", "'documents' must be a non-empty array"),
        ({"model": "m", "query": "q", "documents": []}, "documents", "'documents' must be a non-empty array"),
        ({"model": "m", "query": "q", "documents": ["a", 3]}, "documents", "documents[1] must be"),
        ({"model": "m", "query": "q", "documents": [{"title": "a"}]}, "documents", "documents[0] must be"),
        ({"model": "m", "query": "q", "documents": ["a"], "top_n": 0}, "top_n", "'top_n' must be a positive"),
        ({"model": "m", "query": "q", "documents": ["a"], "top_n": True}, "top_n", "Expected `int | null`"),
        ({"model": "m", "query": "q", "documents": ["a"], "max_tokens_per_doc": 8}, None, "unknown field"),
        ({"query": "q", "documents": ["a"]}, "model", "missing required field `model`"),
        ({"model": "m", "query": "q", "documents": ["a"] * (MAX_DOCUMENTS + 1)}, "documents", "exceeds the maximum"),
    ],
)
async def test_a_bad_body_is_refused_with_the_field_it_names(
    body: dict[str, Any], param: str | None, words: str
) -> None:
    error = await refused(body)
    assert words in error.message
    assert error.extra.get("param") == param


async def test_a_body_that_is_not_json_is_refused() -> None:
    with pytest.raises(InvalidInput, match="JSON only"):
        await parse_rerank(b"{}", "application/msgpack")
    with pytest.raises(InvalidInput, match="body is empty"):
        await parse_rerank(b"  ", "application/json")


async def test_the_answer_keeps_the_score_order_cuts_at_top_n_and_returns_documents() -> None:
    body = await parsed({"model": "m", "query": "q", "documents": ["a", {"text": "b"}, "c"], "top_n": 2})
    payload = {
        "scores": [
            {"item_id": "2", "score": 0.9, "rank": 0},
            {"item_id": "0", "score": 0.5, "rank": 1},
            {"item_id": "1", "score": -1.0, "rank": 2},
        ],
        "usage": {"input_tokens": 12},
    }
    answer = msgspec.json.decode(rerank_answer(body, payload))
    assert answer == {
        "model": "m",
        "results": [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.5}],
        "usage": {"input_tokens": 12},
    }
    with_documents = msgspec.structs.replace(body, top_n=None, return_documents=True)
    results = msgspec.json.decode(rerank_answer(with_documents, payload))["results"]
    assert [r["document"] for r in results] == [{"text": "c"}, {"text": "a"}, {"text": "b"}]


@pytest.fixture(scope="module")
def tiny_catalog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The API tests' catalog (see conftest.py) with a tiny cross-encoder."""
    root = tmp_path_factory.mktemp("tiny-rerank")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "model"))
    reranker = build_tiny_cross_encoder(root / "reranker")
    (catalog / "reranker.yaml").write_text(
        f"name: {RERANKER}\nadapter: cross-encoder\nsource:\n  path: {reranker}\ntasks: [score]\n"
    )
    return catalog


@pytest.fixture
async def rerank_client(make_client: MakeClient) -> Client:
    return await make_client(preload=[RERANKER])


async def test_rerank_scores_are_the_score_routes_for_the_same_pairs(rerank_client: Client) -> None:
    http, _ = rerank_client
    native = await http.post(
        f"/v1/score/{RERANKER}",
        json={"query": {"text": QUERY}, "items": [{"id": str(i), "text": d} for i, d in enumerate(DOCUMENTS)]},
        headers={"Accept": "application/json"},
    )
    assert native.status_code == 200, native.text
    want = [(int(s["item_id"]), s["score"]) for s in native.json()["scores"]]
    response = await http.post("/v1/rerank", json={"model": RERANKER, "query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model"] == RERANKER
    assert [(r["index"], r["relevance_score"]) for r in answer["results"]] == want
    assert answer["usage"]["input_tokens"] == native.json()["usage"]["input_tokens"] > 0


async def test_a_model_without_the_score_task_is_refused_in_openai_words(rerank_client: Client) -> None:
    http, _ = rerank_client
    response = await http.post("/v1/rerank", json={"model": TINY_EMBEDDER, "query": QUERY, "documents": DOCUMENTS})
    assert_openai(response, 400, "invalid_request")
    assert response.json()["error"]["param"] == "model"
    assert "does not support reranking (no score task)" in response.json()["error"]["message"]


async def test_an_unknown_model_and_a_bad_body_answer_in_openai_words(rerank_client: Client) -> None:
    http, _ = rerank_client
    missing = await http.post("/v1/rerank", json={"model": "no/such", "query": QUERY, "documents": DOCUMENTS})
    assert missing.status_code == 404, missing.text
    assert "error" in missing.json()
    bad = await http.post("/v1/rerank", json={"model": RERANKER, "query": QUERY, "documents": [""]})
    assert_openai(bad, 400, "invalid_request")
    assert bad.json()["error"]["param"] == "documents"
