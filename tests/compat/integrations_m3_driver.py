"""Run by the compatibility venv's Python 3.12 (not by pytest): the released SIE integrations
on the model most of them default to, BGE-M3 (here the tiny one), through every output
they offer for it: dense vectors into the stores, sparse vectors (qdrant's named sparse
vectors, chromadb's sparse embedding function, the sparse embedders of LangChain,
LlamaIndex, Haystack, DSPy and CrewAI) and multivectors (LanceDB's ``sie-multivector``
MaxSim search, Weaviate's named vectors, Haystack's multivector embedders); then the
released ``cohere`` client's rerank on the LLM reranker and on BGE-M3's score.

``python integrations_m3_driver.py URL API_KEY SPEC_JSON FOLDER`` prints one JSON
object: per integration, what it answered (``dense``/``sparse``/``multivector`` for the
documents, ``query_*`` for the query, store hits as document indexes best first), or
the error it raised.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any

DOCUMENTS = ["A vector database stores embeddings.", "Bananas are yellow.", "Paris is in France."]
QUERY = DOCUMENTS[1]


def _attempt(out: dict[str, Any], name: str, call: Callable[[], Any]) -> None:
    try:
        out[name] = {"ok": call()}
    except Exception as exc:  # reported to the test, which decides
        out[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}


def _dense(rows: Iterable[Any]) -> list[list[float]]:
    return [[float(x) for x in row] for row in rows]


def _sparse(indices: Any, values: Any) -> dict[str, list[Any]]:
    return {"indices": [int(i) for i in indices], "values": [float(v) for v in values]}


def _sparse_dict(weights: dict[int, float]) -> dict[str, list[Any]]:
    # chromadb's shape, {token id: weight}; kept in the order it came.
    return _sparse(weights.keys(), weights.values())


def _qdrant(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    # A hybrid collection: a named dense vector and a named sparse vector from one encode.
    from qdrant_client import QdrantClient, models
    from sie_qdrant import SIENamedVectorizer

    vectorizer = SIENamedVectorizer(base_url=url, model=spec["m3"])
    named = vectorizer.embed_documents(DOCUMENTS)
    query = vectorizer.embed_query(QUERY)
    store = QdrantClient(":memory:")
    store.create_collection(
        "docs",
        vectors_config={"dense": models.VectorParams(size=len(named[0]["dense"]), distance=models.Distance.COSINE)},
        sparse_vectors_config={"sparse": models.SparseVectorParams()},
    )
    store.upsert(
        "docs",
        points=[
            models.PointStruct(id=i, vector={"dense": v["dense"], "sparse": models.SparseVector(**v["sparse"])})
            for i, v in enumerate(named)
        ],
    )
    sparse_query = models.SparseVector(**query["sparse"])
    by_sparse = store.query_points("docs", query=sparse_query, using="sparse", limit=3).points
    by_dense = store.query_points("docs", query=query["dense"], using="dense", limit=3).points
    fused = store.query_points(
        "docs",
        prefetch=[
            models.Prefetch(query=query["dense"], using="dense", limit=3),
            models.Prefetch(query=sparse_query, using="sparse", limit=3),
        ],
        query=models.FusionQuery(fusion=models.Fusion.RRF),
        limit=3,
    ).points
    return {
        "dense": _dense(v["dense"] for v in named),
        "sparse": [_sparse(**v["sparse"]) for v in named],
        "query_dense": [float(x) for x in query["dense"]],
        "query_sparse": _sparse(**query["sparse"]),
        "sparse_hits": [int(h.id) for h in by_sparse],
        "sparse_scores": [float(h.score) for h in by_sparse],
        "dense_hits": [int(h.id) for h in by_dense],
        "hybrid_hits": [int(h.id) for h in fused],
    }


def _chroma(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    import chromadb
    from sie_chroma import SIEEmbeddingFunction, SIESparseEmbeddingFunction

    dense = SIEEmbeddingFunction(base_url=url, model=spec["m3"])
    collection = chromadb.EphemeralClient().create_collection("m3docs", embedding_function=dense)
    collection.add(documents=DOCUMENTS, ids=[str(i) for i in range(len(DOCUMENTS))])
    found = collection.query(query_texts=[QUERY], n_results=3)
    stored = collection.get(ids=[str(i) for i in range(len(DOCUMENTS))], include=["embeddings"])
    by_id = dict(zip(stored["ids"], stored["embeddings"], strict=True))
    sparse = SIESparseEmbeddingFunction(base_url=url, model=spec["m3"])
    return {
        "dense": _dense(by_id[str(i)] for i in range(len(DOCUMENTS))),
        "dense_hits": [int(i) for i in found["ids"][0]],
        "sparse": [_sparse_dict(s) for s in sparse(DOCUMENTS)],
        "query_sparse": _sparse_dict(sparse.embed_query([QUERY])[0]),
    }


def _lancedb(url: str, spec: dict[str, Any], folder: str) -> dict[str, Any]:
    # ColBERT-style search: a MultiVector column, LanceDB's own MaxSim.
    import lancedb
    import sie_lancedb  # noqa: F401  (registers "sie-multivector" with LanceDB, as its README says)
    from lancedb.embeddings import get_registry
    from lancedb.pydantic import LanceModel, MultiVector

    colbert = get_registry().get("sie-multivector").create(model=spec["m3"], base_url=url)

    class Documents(LanceModel):
        text: str = colbert.SourceField()
        vector: MultiVector(colbert.ndims()) = colbert.VectorField()  # type: ignore[valid-type]

    # LanceDB 0.40 drops, as "bad vectors", any embedding whose length is not ndims(), so a
    # multivector (one row per token) it computes itself is stored as null: the rows go in
    # with the integration's own vectors, as LanceDB's multivector guide does.
    vectors = colbert.compute_source_embeddings(DOCUMENTS)
    table = lancedb.connect(folder).create_table("m3docs", schema=Documents)
    table.add([{"text": t, "vector": v} for t, v in zip(DOCUMENTS, vectors, strict=True)])
    by_text = {row["text"]: _dense(row["vector"]) for row in table.to_arrow().to_pylist()}
    query = colbert.compute_query_embeddings(QUERY)[0]
    hits = table.search(query).limit(3).to_list()
    return {
        "ndims": colbert.ndims(),
        "multivector": [by_text[t] for t in DOCUMENTS],
        "query_multivector": query,
        "multivector_hits": [DOCUMENTS.index(h["text"]) for h in hits],
    }


def _weaviate(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    # Named vectors for a collection with a dense and a multi-vector (ColBERT) index.
    from sie_weaviate import SIENamedVectorizer

    vectorizer = SIENamedVectorizer(base_url=url, model=spec["m3"], output_types=["dense", "multivector"])
    named = vectorizer.embed_documents(DOCUMENTS)
    query = vectorizer.embed_query(QUERY)
    return {
        "dense": _dense(v["dense"] for v in named),
        "multivector": [_dense(v["multivector"]) for v in named],
        "query_dense": [float(x) for x in query["dense"]],
        "query_multivector": _dense(query["multivector"]),
    }


def _langchain(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.documents import Document
    from sie_langchain import SIEEmbeddings, SIEReranker, SIESparseEncoder

    embeddings = SIEEmbeddings(base_url=url, model=spec["m3"])
    sparse = SIESparseEncoder(base_url=url, model=spec["m3"])
    # BGE-M3 as its own reranker: /v1/score with the reference's default hybrid score.
    reranked = SIEReranker(base_url=url, model=spec["m3"]).compress_documents(
        [Document(page_content=t) for t in DOCUMENTS], QUERY
    )
    (query_sparse,) = sparse.encode_queries([QUERY])
    return {
        "dense": _dense(embeddings.embed_documents(DOCUMENTS)),
        "query_dense": [float(x) for x in embeddings.embed_query(QUERY)],
        "sparse": [_sparse(s["indices"], s["values"]) for s in sparse.encode_documents(DOCUMENTS)],
        "query_sparse": _sparse(query_sparse["indices"], query_sparse["values"]),
        "reranked": [[DOCUMENTS.index(d.page_content), float(d.metadata["relevance_score"])] for d in reranked],
    }


def _llamaindex(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from sie_llamaindex import SIEEmbedding, SIESparseEmbeddingFunction

    embedding = SIEEmbedding(base_url=url, model_name=spec["m3"])
    sparse = SIESparseEmbeddingFunction(base_url=url, model_name=spec["m3"])
    indices, values = sparse.encode_documents(DOCUMENTS)
    query_indices, query_values = sparse.encode_queries([QUERY])
    return {
        "dense": _dense(embedding.get_text_embedding_batch(DOCUMENTS)),
        "query_dense": [float(x) for x in embedding.get_query_embedding(QUERY)],
        "sparse": [_sparse(i, v) for i, v in zip(indices, values, strict=True)],
        "query_sparse": _sparse(query_indices[0], query_values[0]),
    }


def _haystack(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from haystack import Document
    from haystack_integrations.components.embedders.sie import (
        SIEDocumentEmbedder,
        SIEMultivectorDocumentEmbedder,
        SIEMultivectorTextEmbedder,
        SIESparseDocumentEmbedder,
        SIESparseTextEmbedder,
        SIETextEmbedder,
    )

    def documents() -> list[Document]:
        return [Document(content=t, id=str(i)) for i, t in enumerate(DOCUMENTS)]

    model = spec["m3"]
    dense = SIEDocumentEmbedder(base_url=url, model=model).run(documents=documents())["documents"]
    sparse = SIESparseDocumentEmbedder(base_url=url, model=model).run(documents=documents())["documents"]
    multi = SIEMultivectorDocumentEmbedder(base_url=url, model=model).run(documents=documents())["documents"]
    query_sparse = SIESparseTextEmbedder(base_url=url, model=model).run(text=QUERY)["sparse_embedding"]
    return {
        "dense": _dense(d.embedding for d in dense),
        "query_dense": [float(x) for x in SIETextEmbedder(base_url=url, model=model).run(text=QUERY)["embedding"]],
        "sparse": [
            _sparse(d.meta["_sparse_embedding"]["indices"], d.meta["_sparse_embedding"]["values"]) for d in sparse
        ],
        "query_sparse": _sparse(query_sparse["indices"], query_sparse["values"]),
        "multivector": [_dense(d.meta["_multivector_embedding"]) for d in multi],
        "query_multivector": _dense(
            SIEMultivectorTextEmbedder(base_url=url, model=model).run(text=QUERY)["multivector_embedding"]
        ),
    }


def _dspy(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    import dspy
    from sie_dspy import SIEEmbedder, SIESparseEmbedder

    embedder = SIEEmbedder(base_url=url, model=spec["m3"])
    hits = dspy.retrievers.Embeddings(corpus=DOCUMENTS, embedder=embedder, k=3)(QUERY)
    sparse = SIESparseEmbedder(base_url=url, model=spec["m3"])
    query_sparse = sparse.embed_query(QUERY)
    return {
        "dense": _dense(embedder(DOCUMENTS)),
        "dense_hits": [DOCUMENTS.index(p) for p in hits.passages],
        "sparse": [_sparse(s["indices"], s["values"]) for s in sparse.embed_documents(DOCUMENTS)],
        "query_sparse": _sparse(query_sparse["indices"], query_sparse["values"]),
    }


def _crewai(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from sie_crewai import SIESparseEmbedder

    sparse = SIESparseEmbedder(base_url=url, model=spec["m3"])
    query_sparse = sparse.embed_query(QUERY)
    return {
        "sparse": [_sparse(s["indices"], s["values"]) for s in sparse.embed_documents(DOCUMENTS)],
        "query_sparse": _sparse(query_sparse["indices"], query_sparse["values"]),
    }


def _cohere(url: str, api_key: str, model: str) -> dict[str, Any]:
    import cohere

    client = cohere.Client(api_key=api_key, base_url=url)
    answer: dict[str, Any] = client.rerank(model=model, query=QUERY, documents=DOCUMENTS, top_n=2).dict()
    return answer


def main(url: str, api_key: str, spec: dict[str, Any], folder: str) -> dict[str, Any]:
    out: dict[str, Any] = {"documents": DOCUMENTS, "query": QUERY}
    _attempt(out, "sie-qdrant", lambda: _qdrant(url, spec))
    _attempt(out, "sie-chroma", lambda: _chroma(url, spec))
    _attempt(out, "sie-lancedb", lambda: _lancedb(url, spec, folder))
    _attempt(out, "sie-weaviate", lambda: _weaviate(url, spec))
    _attempt(out, "sie-langchain", lambda: _langchain(url, spec))
    _attempt(out, "sie-llamaindex", lambda: _llamaindex(url, spec))
    _attempt(out, "sie-haystack", lambda: _haystack(url, spec))
    _attempt(out, "sie-dspy", lambda: _dspy(url, spec))
    _attempt(out, "sie-crewai", lambda: _crewai(url, spec))
    _attempt(out, "cohere-llm-reranker", lambda: _cohere(url, api_key, spec["llm_reranker"]))
    _attempt(out, "cohere-m3", lambda: _cohere(url, api_key, spec["m3"]))
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])))
