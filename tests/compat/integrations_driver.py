"""Run by the compatibility venv's Python 3.12 (not by pytest): the released SIE
integrations that need no server of their own, as a new user runs them against one Sift
URL (``SIE_BASE_URL`` and ``SIE_API_KEY`` set, as their docs say): embed through the
integration, store in the vector store's embedded mode, query.

``python integrations_driver.py URL SPEC_JSON FOLDER`` prints one JSON object: per
integration, the stored vectors and the query's hits (document indexes, best first), or
the error it raised.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

DOCUMENTS = ["A vector database stores embeddings.", "Bananas are yellow.", "Paris is in France."]
QUERY = DOCUMENTS[1]


def _attempt(out: dict[str, Any], name: str, call: Callable[[], Any]) -> None:
    try:
        out[name] = {"ok": call()}
    except Exception as exc:  # reported to the test, which decides
        out[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}


def _qdrant(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from qdrant_client import QdrantClient
    from qdrant_client.models import Distance, PointStruct, VectorParams
    from sie_qdrant import SIEVectorizer

    vectorizer = SIEVectorizer(base_url=url, model=spec["embedder"])
    vectors = vectorizer.embed_documents(DOCUMENTS)
    store = QdrantClient(":memory:")
    store.create_collection("docs", vectors_config=VectorParams(size=len(vectors[0]), distance=Distance.COSINE))
    store.upsert(
        "docs",
        points=[
            PointStruct(id=i, vector=v, payload={"text": t})
            for i, (t, v) in enumerate(zip(DOCUMENTS, vectors, strict=True))
        ],
    )
    hits = store.query_points("docs", query=vectorizer.embed_query(QUERY), limit=3).points
    return {"vectors": [list(map(float, v)) for v in vectors], "hits": [int(h.id) for h in hits]}


def _chroma(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    import chromadb
    from sie_chroma import SIEEmbeddingFunction

    store = chromadb.EphemeralClient()
    collection = store.create_collection(
        "docs", embedding_function=SIEEmbeddingFunction(base_url=url, model=spec["embedder"])
    )
    collection.add(documents=DOCUMENTS, ids=[str(i) for i in range(len(DOCUMENTS))])
    stored = collection.get(ids=[str(i) for i in range(len(DOCUMENTS))], include=["embeddings"])
    by_id = dict(zip(stored["ids"], stored["embeddings"], strict=True))
    found = collection.query(query_texts=[QUERY], n_results=3)
    return {
        "vectors": [[float(x) for x in by_id[str(i)]] for i in range(len(DOCUMENTS))],
        "hits": [int(i) for i in found["ids"][0]],
    }


def _lancedb(url: str, spec: dict[str, Any], folder: str) -> dict[str, Any]:
    import lancedb
    from lancedb.embeddings import get_registry
    from lancedb.pydantic import LanceModel, Vector
    from sie_lancedb import SIEReranker

    sie = get_registry().get("sie").create(model=spec["embedder"], base_url=url)

    class Documents(LanceModel):
        text: str = sie.SourceField()
        vector: Vector(sie.ndims()) = sie.VectorField()  # type: ignore[valid-type]

    table = lancedb.connect(folder).create_table("docs", schema=Documents)
    table.add([{"text": t} for t in DOCUMENTS])
    by_text = {row["text"]: [float(x) for x in row["vector"]] for row in table.to_arrow().to_pylist()}
    hits = table.search(QUERY).limit(3).to_list()
    reranked = table.search(QUERY).limit(3).rerank(SIEReranker(model=spec["reranker"], base_url=url)).to_list()
    return {
        "vectors": [by_text[t] for t in DOCUMENTS],
        "hits": [DOCUMENTS.index(h["text"]) for h in hits],
        "reranked": [[DOCUMENTS.index(h["text"]), float(h["_relevance_score"])] for h in reranked],
    }


def main(url: str, spec: dict[str, Any], folder: str) -> dict[str, Any]:
    out: dict[str, Any] = {"documents": DOCUMENTS, "query": QUERY}
    _attempt(out, "sie-qdrant", lambda: _qdrant(url, spec))
    _attempt(out, "sie-chroma", lambda: _chroma(url, spec))
    _attempt(out, "sie-lancedb", lambda: _lancedb(url, spec, folder))
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])))
