"""Run by the compatibility venv's Python 3.12 (not by pytest): the nine released SIE
integrations, as a new user runs them per their READMEs against one Sift URL
(``SIE_BASE_URL`` and ``SIE_API_KEY`` set, as their docs say): embed through the
integration, store in the vector store's embedded or in-memory mode, query; rerank and
extract through the integration's reranker and extractor where it has them.

``python integrations_driver.py URL SPEC_JSON FOLDER`` prints one JSON object: per
integration, what it answered (the stored vectors and the query's hits as document
indexes best first, ``reranked`` as ``[index, score]`` best first, the extracted
``entities``, ``sparse`` vectors), or the error it raised.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

DOCUMENTS = ["A vector database stores embeddings.", "Bananas are yellow.", "Paris is in France."]
QUERY = DOCUMENTS[1]
EXTRACT_TEXT = "John Smith works at Acme Corp in Paris."
LABELS = ["person", "organization", "location"]
CLASSES = ["technical", "business", "legal"]


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


def _vectors(rows: Any) -> list[list[float]]:
    return [[float(x) for x in row] for row in rows]


def _entities(found: list[Any]) -> list[dict[str, Any]]:
    """Entities as plain dicts, whether the integration hands back dicts or dataclasses."""
    keys = ("text", "label", "score", "start", "end")
    return [{k: (e.get(k) if isinstance(e, dict) else getattr(e, k)) for k in keys} for e in found]


def _sparse(indices: Any, values: Any) -> dict[str, list[Any]]:
    return {"indices": [int(i) for i in indices], "values": [float(v) for v in values]}


def _weaviate(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    # Client-side helpers: they return what Weaviate's self-provided vectors take; no Weaviate server.
    from sie_weaviate import SIEDocumentEnricher, SIEVectorizer

    vectorizer = SIEVectorizer(base_url=url, model=spec["embedder"])
    vectors = vectorizer.embed_documents(DOCUMENTS)
    query = vectorizer.embed_query(QUERY)
    with SIEDocumentEnricher(
        base_url=url,
        embed_model=spec["embedder"],
        extract_model=spec["extractor"],
        labels=LABELS,
        classify_model=spec["classifier"],
        classify_labels=CLASSES,
    ) as enricher:
        (doc,) = enricher.enrich([EXTRACT_TEXT])
    return {
        "vectors": _vectors(vectors),
        "query_vector": [float(x) for x in query],
        "enriched": {"vector": [float(x) for x in doc.vector], "properties": doc.properties},
        "entities": _entities(doc.entities or []),
        "classifications": [dict(c) for c in doc.classifications or []],
    }


def _langchain(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.documents import Document
    from langchain_core.vectorstores import InMemoryVectorStore
    from sie_langchain import SIEEmbeddings, SIEExtractor, SIEReranker, SIESparseEncoder

    embeddings = SIEEmbeddings(base_url=url, model=spec["embedder"])
    store = InMemoryVectorStore(embedding=embeddings)
    store.add_documents([Document(page_content=t, id=str(i)) for i, t in enumerate(DOCUMENTS)])
    hits = store.similarity_search(QUERY, k=3)
    reranked = SIEReranker(base_url=url, model=spec["reranker"]).compress_documents(
        [Document(page_content=t) for t in DOCUMENTS], QUERY
    )
    extracted = SIEExtractor(base_url=url, model=spec["extractor"], labels=LABELS).invoke(EXTRACT_TEXT)
    sparse = SIESparseEncoder(base_url=url, model=spec["sparse"]).encode_documents(DOCUMENTS)
    return {
        "vectors": _vectors(store.store[str(i)]["vector"] for i in range(len(DOCUMENTS))),
        "hits": [DOCUMENTS.index(d.page_content) for d in hits],
        "reranked": [[DOCUMENTS.index(d.page_content), float(d.metadata["relevance_score"])] for d in reranked],
        "entities": _entities(extracted["entities"]),
        "sparse": [_sparse(s["indices"], s["values"]) for s in sparse],
    }


def _llamaindex(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.schema import TextNode
    from sie_llamaindex import SIEEmbedding, SIENodePostprocessor, SIESparseEmbeddingFunction, create_sie_extractor_tool

    Settings.embed_model = SIEEmbedding(base_url=url, model_name=spec["embedder"])
    nodes = [TextNode(text=t, id_=str(i)) for i, t in enumerate(DOCUMENTS)]
    index = VectorStoreIndex(nodes)  # the in-memory SimpleVectorStore
    hits = index.as_retriever(similarity_top_k=3).retrieve(QUERY)
    reranker = SIENodePostprocessor(base_url=url, model=spec["reranker"])
    reranked = reranker.postprocess_nodes(hits, query_str=QUERY)
    tool = create_sie_extractor_tool(base_url=url, model=spec["extractor"], labels=LABELS)
    extracted = tool.call(text=EXTRACT_TEXT).raw_output
    indices, values = SIESparseEmbeddingFunction(base_url=url, model_name=spec["sparse"]).encode_documents(DOCUMENTS)
    stored = index.vector_store.to_dict()["embedding_dict"]
    return {
        "vectors": _vectors(stored[str(i)] for i in range(len(DOCUMENTS))),
        "hits": [int(h.node.node_id) for h in hits],
        "reranked": [[int(h.node.node_id), float(h.score)] for h in reranked],
        "entities": _entities(extracted["entities"]),
        "sparse": [_sparse(i, v) for i, v in zip(indices, values, strict=True)],
    }


def _haystack(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    from haystack import Document, Pipeline
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack_integrations.components.embedders.sie import (
        SIEDocumentEmbedder,
        SIESparseDocumentEmbedder,
        SIETextEmbedder,
    )
    from haystack_integrations.components.extractors.sie import SIEExtractor
    from haystack_integrations.components.rankers.sie import SIERanker

    store = InMemoryDocumentStore()
    embedded = SIEDocumentEmbedder(base_url=url, model=spec["embedder"]).run(
        documents=[Document(content=t, id=str(i)) for i, t in enumerate(DOCUMENTS)]
    )["documents"]
    store.write_documents(embedded)
    search = Pipeline()
    search.add_component("embedder", SIETextEmbedder(base_url=url, model=spec["embedder"]))
    search.add_component("retriever", InMemoryEmbeddingRetriever(document_store=store, top_k=3))
    search.add_component("ranker", SIERanker(base_url=url, model=spec["reranker"]))
    search.connect("embedder.embedding", "retriever.query_embedding")
    search.connect("retriever.documents", "ranker.documents")
    found = search.run({"embedder": {"text": QUERY}, "ranker": {"query": QUERY}}, include_outputs_from={"retriever"})
    extracted = SIEExtractor(base_url=url, model=spec["extractor"], labels=LABELS).run(text=EXTRACT_TEXT)
    sparse = SIESparseDocumentEmbedder(base_url=url, model=spec["sparse"]).run(
        documents=[Document(content=t) for t in DOCUMENTS]
    )["documents"]
    by_id = {d.id: d.embedding for d in store.filter_documents()}
    return {
        "vectors": _vectors(by_id[str(i)] for i in range(len(DOCUMENTS))),
        "hits": [int(d.id) for d in found["retriever"]["documents"]],
        "reranked": [[int(d.id), float(d.meta["score"])] for d in found["ranker"]["documents"]],
        "entities": _entities(extracted["entities"]),
        "sparse": [
            _sparse(d.meta["_sparse_embedding"]["indices"], d.meta["_sparse_embedding"]["values"]) for d in sparse
        ],
    }


def _dspy(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    import dspy
    from sie_dspy import SIEEmbedder, SIEExtractor, SIEReranker, SIESparseEmbedder

    embedder = SIEEmbedder(base_url=url, model=spec["embedder"])
    retriever = dspy.retrievers.Embeddings(corpus=DOCUMENTS, embedder=embedder, k=3)
    hits = retriever(QUERY)
    reranked = SIEReranker(base_url=url, model=spec["reranker"])(query=QUERY, passages=DOCUMENTS)
    extracted = SIEExtractor(base_url=url, model=spec["extractor"], labels=LABELS)(text=EXTRACT_TEXT)
    sparse = SIESparseEmbedder(base_url=url, model=spec["sparse"]).embed_documents(DOCUMENTS)
    return {
        "vectors": _vectors(embedder(DOCUMENTS)),
        "hits": [DOCUMENTS.index(p) for p in hits.passages],
        "reranked": [[DOCUMENTS.index(p), float(s)] for p, s in zip(reranked.passages, reranked.scores, strict=True)],
        "entities": extracted.entities_dict,
        "sparse": [_sparse(s["indices"], s["values"]) for s in sparse],
    }


def _crewai(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    # CrewAI agents call these tools with their arguments; its dense embeddings go through
    # the OpenAI-compatible route (tests/compat/test_sie_sdk.py covers that client).
    from sie_crewai import SIEExtractorTool, SIERerankerTool, SIESparseEmbedder

    ranked = SIERerankerTool(base_url=url, model=spec["reranker"]).run(query=QUERY, documents=DOCUMENTS)
    extracted = SIEExtractorTool(base_url=url, model=spec["extractor"], labels=LABELS).run(text=EXTRACT_TEXT)
    sparse = SIESparseEmbedder(base_url=url, model=spec["sparse"]).embed_documents(DOCUMENTS)
    return {
        "reranked_text": ranked,
        "extracted_text": extracted,
        "sparse": [_sparse(s["indices"], s["values"]) for s in sparse],
    }


def _new_families(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    # The decoder embedder (its query instruction follows the integration's is_query) and the
    # LLM reranker, through one integration.
    from langchain_core.documents import Document
    from sie_langchain import SIEEmbeddings, SIEReranker

    embeddings = SIEEmbeddings(base_url=url, model=spec["decoder_embedder"])
    reranked = SIEReranker(base_url=url, model=spec["llm_reranker"]).compress_documents(
        [Document(page_content=t) for t in DOCUMENTS], QUERY
    )
    return {
        "vectors": _vectors(embeddings.embed_documents(DOCUMENTS)),
        "query_vector": [float(x) for x in embeddings.embed_query(QUERY)],
        "reranked": [[DOCUMENTS.index(d.page_content), float(d.metadata["relevance_score"])] for d in reranked],
    }


def main(url: str, spec: dict[str, Any], folder: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "documents": DOCUMENTS,
        "query": QUERY,
        "extract_text": EXTRACT_TEXT,
        "labels": LABELS,
        "classes": CLASSES,
    }
    _attempt(out, "sie-qdrant", lambda: _qdrant(url, spec))
    _attempt(out, "sie-chroma", lambda: _chroma(url, spec))
    _attempt(out, "sie-lancedb", lambda: _lancedb(url, spec, folder))
    _attempt(out, "sie-weaviate", lambda: _weaviate(url, spec))
    _attempt(out, "sie-langchain", lambda: _langchain(url, spec))
    _attempt(out, "sie-llamaindex", lambda: _llamaindex(url, spec))
    _attempt(out, "sie-haystack", lambda: _haystack(url, spec))
    _attempt(out, "sie-dspy", lambda: _dspy(url, spec))
    _attempt(out, "sie-crewai", lambda: _crewai(url, spec))
    _attempt(out, "new-families", lambda: _new_families(url, spec))
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])))
