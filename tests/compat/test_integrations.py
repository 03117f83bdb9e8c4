"""Black-box compatibility: the nine released SIE integrations (0.10.1), unchanged, against
``sift serve`` (tests/compat/conftest.py), as a new user runs them per their READMEs:
``SIE_BASE_URL`` and ``SIE_API_KEY`` set, embed through the integration, store in the
vector store's embedded or in-memory mode (qdrant-client's ``:memory:``, chromadb's
in-process client, a LanceDB folder, LangChain's ``InMemoryVectorStore``, LlamaIndex's
``SimpleVectorStore``, Haystack's ``InMemoryDocumentStore``, DSPy's ``Embeddings``
retriever), query, rerank and extract through the integration's own classes; Weaviate's
vectorizer and enricher and CrewAI's tools need no server of their own. Every answer is
checked against Sift's own, asked directly. They run in the compatibility venv, in a
subprocess: ``tests/compat/integrations_driver.py``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.adapters.parity.cases import NLI_MODEL
from tests.adapters.parity.decoder_cases import EMBEDDER, RERANKER
from tests.compat.conftest import COMPAT_PYTHON, KEY, NER, RERANK, SPARSE
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

DRIVER = Path(__file__).with_name("integrations_driver.py")
SPEC = {
    "embedder": TINY_EMBEDDER,
    "reranker": RERANK,
    "extractor": NER,
    "classifier": NLI_MODEL,
    "sparse": SPARSE,
    "decoder_embedder": EMBEDDER,
    "llm_reranker": RERANKER,
}
INTEGRATIONS = (
    "sie-qdrant",
    "sie-chroma",
    "sie-lancedb",
    "sie-weaviate",
    "sie-langchain",
    "sie-llamaindex",
    "sie-haystack",
    "sie-dspy",
    "sie-crewai",
)
# Those that store dense vectors and search them (CrewAI's dense embeddings are the OpenAI route).
STORES = tuple(name for name in INTEGRATIONS if name not in ("sie-weaviate", "sie-crewai"))
RERANKERS = ("sie-lancedb", "sie-langchain", "sie-llamaindex", "sie-haystack", "sie-dspy")
EXTRACTORS = ("sie-weaviate", "sie-langchain", "sie-llamaindex", "sie-haystack", "sie-dspy")
SPARSE_EMBEDDERS = ("sie-langchain", "sie-llamaindex", "sie-haystack", "sie-dspy", "sie-crewai")
HEADERS = {"Authorization": f"Bearer {KEY}", "Accept": "application/json"}


@pytest.fixture(scope="module")
def answers(direct: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("lancedb")
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), direct.url, json.dumps(SPEC), str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": "", "SIE_BASE_URL": direct.url, "SIE_API_KEY": KEY},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{url}{path}", json=body, headers=HEADERS, timeout=60)
    answer.raise_for_status()
    result: dict[str, Any] = answer.json()
    return result


def sift_vectors(url: str, texts: list[str], model: str = TINY_EMBEDDER, **options: Any) -> np.ndarray:
    body = {"items": [{"text": t} for t in texts], "params": {"options": options}}
    items = _post(url, f"/v1/encode/{model}", body)["items"]
    return np.array([r["dense"]["values"] for r in items], dtype=np.float64)


def sift_scores(url: str, query: str, documents: list[str], model: str = RERANK) -> dict[int, float]:
    body = {"query": {"text": query}, "items": [{"id": str(i), "text": d} for i, d in enumerate(documents)]}
    return {int(s["item_id"]): s["score"] for s in _post(url, f"/v1/score/{model}", body)["scores"]}


def sift_extract(url: str, model: str, text: str, labels: list[str]) -> dict[str, Any]:
    body = {"items": [{"text": text}], "params": {"labels": labels}}
    item: dict[str, Any] = _post(url, f"/v1/extract/{model}", body)["items"][0]
    return item


def ok(answers: dict[str, Any], integration: str) -> dict[str, Any]:
    entry = answers[integration]
    assert "ok" in entry, f"{integration}: {entry.get('error')}\n{entry.get('trace')}"
    got: dict[str, Any] = entry["ok"]
    return got


def assert_same_entities(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    def spans(entities: list[dict[str, Any]]) -> list[tuple[str, str, int, int]]:
        return [(e["text"], e["label"], e["start"], e["end"]) for e in entities]

    assert want, "the tiny GLiNER finds nothing: the comparison would be empty"
    assert spans(got) == spans(want)
    np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_every_integration_runs_against_sift(integration: str, answers: dict[str, Any]) -> None:
    ok(answers, integration)


@pytest.mark.parametrize("integration", STORES)
def test_an_integration_embeds_stores_and_finds_through_sift(
    integration: str, answers: dict[str, Any], direct: ServerProcess
) -> None:
    got = ok(answers, integration)
    documents: list[str] = answers["documents"]
    # The stored vectors are Sift's (float32 as the store keeps them).
    want = sift_vectors(direct.url, documents)
    np.testing.assert_allclose(np.array(got["vectors"]), want, rtol=1e-5, atol=1e-6)
    # The query is the second document: it finds itself first, then the rest by cosine.
    unit = want / np.linalg.norm(want, axis=1, keepdims=True)
    query = unit[documents.index(answers["query"])]
    assert got["hits"] == [int(i) for i in np.argsort(-(unit @ query), kind="stable")]


@pytest.mark.parametrize("integration", RERANKERS)
def test_an_integrations_reranker_scores_as_sift(
    integration: str, answers: dict[str, Any], direct: ServerProcess
) -> None:
    got = ok(answers, integration)["reranked"]
    documents: list[str] = answers["documents"]
    want = sift_scores(direct.url, answers["query"], documents)
    assert sorted(index for index, _ in got) == sorted(want)
    for index, value in got:
        assert value == pytest.approx(want[index], rel=1e-5, abs=1e-6)
    if integration != "sie-lancedb":  # LanceDB's reranked rows come back in its own order
        assert [index for index, _ in got] == sorted(want, key=lambda i: -want[i])


@pytest.mark.parametrize("integration", EXTRACTORS)
def test_an_integrations_extractor_finds_what_sift_finds(
    integration: str, answers: dict[str, Any], direct: ServerProcess
) -> None:
    got = ok(answers, integration)["entities"]
    want = sift_extract(direct.url, NER, answers["extract_text"], answers["labels"])["entities"]
    assert_same_entities(got, want)


@pytest.mark.parametrize("integration", SPARSE_EMBEDDERS)
def test_an_integrations_sparse_embedder_gets_sifts_sparse_vectors(
    integration: str, answers: dict[str, Any], direct: ServerProcess
) -> None:
    got = ok(answers, integration)["sparse"]
    body = {"items": [{"text": t} for t in answers["documents"]], "params": {"output_types": ["sparse"]}}
    want = [item["sparse"] for item in _post(direct.url, f"/v1/encode/{SPARSE}", body)["items"]]
    assert [g["indices"] for g in got] == [w["indices"] for w in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g["values"], w["values"], rtol=1e-5, atol=1e-6)


def test_the_weaviate_enricher_gives_sifts_vector_entities_and_class(
    answers: dict[str, Any], direct: ServerProcess
) -> None:
    got = ok(answers, "sie-weaviate")
    text = answers["extract_text"]
    np.testing.assert_allclose(got["enriched"]["vector"], sift_vectors(direct.url, [text])[0], rtol=1e-5, atol=1e-6)
    query = sift_vectors(direct.url, [answers["query"]])[0]
    np.testing.assert_allclose(got["query_vector"], query, rtol=1e-5, atol=1e-6)
    entities = sift_extract(direct.url, NER, text, answers["labels"])["entities"]
    # Query-agent properties: each label's entity texts, first seen first, once each.
    properties = got["enriched"]["properties"]
    assert properties["text"] == text
    for label in answers["labels"]:
        texts = list(dict.fromkeys(e["text"] for e in entities if e["label"] == label))
        assert properties.get(label, []) == texts
    classes = sift_extract(direct.url, NLI_MODEL, text, answers["classes"])["classifications"]
    best = max(classes, key=lambda c: c["score"])
    assert properties["classification"] == best["label"]
    assert properties["classification_score"] == pytest.approx(best["score"], rel=1e-5)
    assert [c["label"] for c in got["classifications"]] == [c["label"] for c in classes]


def test_the_crewai_tools_report_sifts_ranking_and_entities(answers: dict[str, Any], direct: ServerProcess) -> None:
    got = ok(answers, "sie-crewai")
    documents: list[str] = answers["documents"]
    want = sift_scores(direct.url, answers["query"], documents)
    # The agent reads "N. [Score: s] document", best first.
    lines = got["reranked_text"].splitlines()[1:]
    ranked = sorted(want, key=lambda i: -want[i])
    assert lines == [f"{n}. [Score: {want[i]:.4f}] {documents[i]}" for n, i in enumerate(ranked, 1)]
    entities = sift_extract(direct.url, NER, answers["extract_text"], answers["labels"])["entities"]
    assert entities
    for e in entities:
        assert f"- {e['text']} ({e['label']}) [confidence: {e['score']:.2f}]" in got["extracted_text"]


def test_an_integration_on_the_decoder_embedder_and_llm_reranker(
    answers: dict[str, Any], direct: ServerProcess
) -> None:
    got = ok(answers, "new-families")
    documents: list[str] = answers["documents"]
    np.testing.assert_allclose(got["vectors"], sift_vectors(direct.url, documents, EMBEDDER), rtol=1e-5, atol=1e-6)
    # The query goes out with is_query: the model's instruction template applies, so it differs
    # from the same text embedded as a document.
    query = sift_vectors(direct.url, [answers["query"]], EMBEDDER, is_query=True)[0]
    np.testing.assert_allclose(got["query_vector"], query, rtol=1e-5, atol=1e-6)
    assert not np.allclose(query, sift_vectors(direct.url, [answers["query"]], EMBEDDER)[0], atol=1e-3)
    want = sift_scores(direct.url, answers["query"], documents, RERANKER)
    assert [index for index, _ in got["reranked"]] == sorted(want, key=lambda i: -want[i])
    for index, value in got["reranked"]:
        assert value == pytest.approx(want[index], rel=1e-5, abs=1e-6)
