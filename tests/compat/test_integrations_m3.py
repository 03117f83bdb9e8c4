"""Black-box compatibility: the released SIE integrations (0.10.1), unchanged, on the model
most of them default to (``BAAI/bge-m3``; here the tiny one of tests/fixtures/tiny_m3.py)
through every output each offers for it, against ``sift serve`` (tests/compat/conftest.py,
the package's one server): dense vectors into the stores, sparse vectors (qdrant's hybrid
collection, chromadb's sparse function, the sparse embedders of LangChain, LlamaIndex,
Haystack, DSPy and CrewAI), multivectors (LanceDB's MaxSim search, Weaviate's named vectors,
Haystack's multivector embedders), BGE-M3 as a LangChain reranker; and the released
``cohere`` client's rerank on the LLM reranker and on BGE-M3. Each answer equals what Sift
gives asked directly (Sift's own equal FlagEmbedding's: tests/compat/test_sie_sdk_m3.py).
One driver run in the compatibility venv: ``tests/compat/integrations_m3_driver.py``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.adapters.parity.decoder_cases import RERANKER
from tests.adapters.parity.m3_cases import MODEL as M3
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess

DRIVER = Path(__file__).with_name("integrations_m3_driver.py")
SPEC = {"m3": M3, "llm_reranker": RERANKER}
HEADERS = {"Authorization": f"Bearer {KEY}", "Accept": "application/json"}
TOL = {"rtol": 1e-5, "atol": 1e-6}
DENSE = ("sie-qdrant", "sie-chroma", "sie-weaviate", "sie-langchain", "sie-llamaindex", "sie-haystack", "sie-dspy")
SPARSE = ("sie-qdrant", "sie-chroma", "sie-langchain", "sie-llamaindex", "sie-haystack", "sie-dspy", "sie-crewai")
MULTIVECTOR = ("sie-lancedb", "sie-weaviate", "sie-haystack")
INTEGRATIONS = tuple(dict.fromkeys(DENSE + SPARSE + MULTIVECTOR))


@pytest.fixture(scope="module")
def answers(direct: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("lancedb-m3")
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), direct.url, KEY, json.dumps(SPEC), str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": "", "SIE_BASE_URL": direct.url, "SIE_API_KEY": KEY},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def sift(direct: ServerProcess, answers: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Sift's own M3 answers, asked directly: every output for the documents and the query."""

    def encode(texts: list[str], **options: Any) -> list[dict[str, Any]]:
        params = {"output_types": ["dense", "sparse", "multivector"], "options": options}
        body = {"items": [{"text": t} for t in texts], "params": params}
        answer = httpx.post(f"{direct.url}/v1/encode/{M3}", json=body, headers=HEADERS, timeout=60)
        answer.raise_for_status()
        items: list[dict[str, Any]] = answer.json()["items"]
        return items

    return {"documents": encode(answers["documents"]), "query": encode([answers["query"]], is_query=True)}


def ok(answers: dict[str, Any], name: str) -> dict[str, Any]:
    entry = answers[name]
    assert "ok" in entry, f"{name}: {entry.get('error')}\n{entry.get('trace')}"
    got: dict[str, Any] = entry["ok"]
    return got


def assert_sparse(got: dict[str, Any], want: dict[str, Any]) -> None:
    # Token ids exactly, in Sift's order (first appearance, as the reference).
    assert got["indices"] == want["indices"]
    np.testing.assert_allclose(got["values"], want["values"], **TOL)


def dense_of(item: dict[str, Any]) -> list[float]:
    values: list[float] = item["dense"]["values"]
    return values


def multivector_of(item: dict[str, Any]) -> np.ndarray:
    return np.array(item["multivector"]["values"], dtype=np.float64)


@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_every_integration_runs_on_bge_m3(integration: str, answers: dict[str, Any]) -> None:
    ok(answers, integration)


@pytest.mark.parametrize("integration", DENSE)
def test_dense_vectors_on_bge_m3_are_sifts(integration: str, answers: dict[str, Any], sift: dict[str, Any]) -> None:
    got = ok(answers, integration)
    np.testing.assert_allclose(got["dense"], [dense_of(i) for i in sift["documents"]], **TOL)
    if "query_dense" in got:
        np.testing.assert_allclose(got["query_dense"], dense_of(sift["query"][0]), **TOL)


@pytest.mark.parametrize("integration", SPARSE)
def test_sparse_vectors_on_bge_m3_are_sifts(integration: str, answers: dict[str, Any], sift: dict[str, Any]) -> None:
    got = ok(answers, integration)
    assert len(got["sparse"]) == len(sift["documents"])
    for vector, item in zip(got["sparse"], sift["documents"], strict=True):
        assert_sparse(vector, item["sparse"])
    assert_sparse(got["query_sparse"], sift["query"][0]["sparse"])


@pytest.mark.parametrize("integration", MULTIVECTOR)
def test_multivectors_on_bge_m3_are_sifts(integration: str, answers: dict[str, Any], sift: dict[str, Any]) -> None:
    got = ok(answers, integration)
    for vectors, item in zip(got["multivector"], sift["documents"], strict=True):
        np.testing.assert_allclose(vectors, multivector_of(item), **TOL)
    np.testing.assert_allclose(got["query_multivector"], multivector_of(sift["query"][0]), **TOL)


def ranking(scores: list[float]) -> list[int]:
    return [int(i) for i in np.argsort(-np.array(scores), kind="stable")]


def test_qdrants_hybrid_collection_finds_by_sifts_sparse_and_dense(
    answers: dict[str, Any], sift: dict[str, Any]
) -> None:
    got = ok(answers, "sie-qdrant")
    query = sift["query"][0]
    # Qdrant scores sparse vectors by the dot product over shared token ids.
    weights = dict(zip(query["sparse"]["indices"], query["sparse"]["values"], strict=True))
    sparse_scores = [
        sum(weights.get(i, 0.0) * v for i, v in zip(d["sparse"]["indices"], d["sparse"]["values"], strict=True))
        for d in sift["documents"]
    ]
    nonzero = [i for i in ranking(sparse_scores) if sparse_scores[i] > 0]
    assert got["sparse_hits"] == nonzero  # documents sharing no token with the query are not hits
    np.testing.assert_allclose(got["sparse_scores"], [sparse_scores[i] for i in nonzero], rtol=1e-4)
    dense = np.array([dense_of(d) for d in sift["documents"]])
    unit = dense / np.linalg.norm(dense, axis=1, keepdims=True)
    assert got["dense_hits"] == ranking(list(unit @ np.array(dense_of(query))))
    assert got["hybrid_hits"][0] == answers["documents"].index(answers["query"])
    assert sorted(got["hybrid_hits"]) == list(range(len(answers["documents"])))


def test_lancedb_maxsim_search_ranks_by_sifts_multivectors(answers: dict[str, Any], sift: dict[str, Any]) -> None:
    got = ok(answers, "sie-lancedb")
    query = multivector_of(sift["query"][0])
    assert got["ndims"] == query.shape[1]  # from /v1/models' dims.multivector
    # LanceDB's multivector search is cosine MaxSim: each query token's best document token, summed.
    maxsim = []
    for item in sift["documents"]:
        doc = multivector_of(item)
        cos = (query / np.linalg.norm(query, axis=1, keepdims=True)) @ (
            doc / np.linalg.norm(doc, axis=1, keepdims=True)
        ).T
        maxsim.append(float(cos.max(axis=1).sum()))
    assert got["multivector_hits"] == ranking(maxsim)


def test_bge_m3_reranks_in_langchain_as_sifts_score(answers: dict[str, Any], direct: ServerProcess) -> None:
    got = ok(answers, "sie-langchain")["reranked"]
    documents: list[str] = answers["documents"]
    body = {"query": {"text": answers["query"]}, "items": [{"id": str(i), "text": d} for i, d in enumerate(documents)]}
    answer = httpx.post(f"{direct.url}/v1/score/{M3}", json=body, headers=HEADERS, timeout=60)
    answer.raise_for_status()
    want = {int(s["item_id"]): s["score"] for s in answer.json()["scores"]}
    assert [index for index, _ in got] == sorted(want, key=lambda i: -want[i])
    for index, value in got:
        assert value == pytest.approx(want[index], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("model", [RERANKER, M3], ids=["llm-reranker", "bge-m3"])
def test_cohere_rerank_on_the_new_families_is_sifts_score(
    model: str, answers: dict[str, Any], direct: ServerProcess
) -> None:
    got = ok(answers, "cohere-llm-reranker" if model == RERANKER else "cohere-m3")["results"]
    documents: list[str] = answers["documents"]
    body = {"query": {"text": answers["query"]}, "items": [{"id": str(i), "text": d} for i, d in enumerate(documents)]}
    answer = httpx.post(f"{direct.url}/v1/score/{model}", json=body, headers=HEADERS, timeout=60)
    answer.raise_for_status()
    want = {int(s["item_id"]): s["score"] for s in answer.json()["scores"]}
    best = sorted(want, key=lambda i: -want[i])[:2]  # top_n=2
    assert [r["index"] for r in got] == best
    for entry in got:
        assert entry["relevance_score"] == pytest.approx(want[entry["index"]], rel=1e-6, abs=1e-7)
