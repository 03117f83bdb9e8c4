"""The Cohere-shaped rerank body (API.md §14) and its answer, over the score
service: ``{model, query, documents, top_n?, return_documents?, options?}`` in,
``{model, results: [{index, relevance_score, document?}], usage}`` out, as the
reference server's ``/v1/rerank`` answers it. Unknown fields are refused (the
reference does so), and every error is in the OpenAI envelope."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from sift_server.core.embeddings import is_blank, is_json_type
from sift_server.errors import InvalidInput
from sift_server.registry.catalog import MAX_MODEL_NAME_CHARS
from sift_server.wire.msgspec_text import top_field
from sift_server.wire.schemas import Item, ScoreBody
from sift_server.wire.sliced import decode_sliced
from sift_server.wire.split import Buffer

# As the score route's (service/score.py) and the reference's rerank route.
MAX_DOCUMENTS = 1000


class RerankBody(msgspec.Struct, forbid_unknown_fields=True):
    model: Annotated[str, msgspec.Meta(max_length=MAX_MODEL_NAME_CHARS)]
    query: str | msgspec.UnsetType = msgspec.UNSET
    # Required: UNSET only while the body is decoded in slices (wire/sliced.py).
    # Each a string or a Cohere document object ({"text": ...}).
    documents: list[Any] | msgspec.UnsetType = msgspec.UNSET
    top_n: int | None = None
    return_documents: bool = False
    options: dict[str, Any] | None = None


async def parse_rerank(raw: Buffer, content_type: str | None) -> RerankBody:
    if not is_json_type(content_type):
        raise InvalidInput("This route accepts JSON only: send 'Content-Type: application/json'.")
    if is_blank(raw):
        raise InvalidInput("The request body is empty; send a JSON object with 'model', 'query' and 'documents'.")
    try:
        body = await decode_sliced(raw, "json", RerankBody, "documents", Any)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, param=top_field(exc.message)) from exc
    _check(body)
    return body


def _check(body: RerankBody) -> None:
    if not body.model.strip():
        raise InvalidInput("'model' must be a non-empty string", param="model")
    if isinstance(body.query, msgspec.UnsetType) or not body.query.strip():
        raise InvalidInput("'query' must be a non-empty string", param="query")
    if isinstance(body.documents, msgspec.UnsetType) or not body.documents:
        raise InvalidInput("'documents' must be a non-empty array", param="documents")
    if len(body.documents) > MAX_DOCUMENTS:
        raise InvalidInput(f"'documents' exceeds the maximum of {MAX_DOCUMENTS} per request", param="documents")
    if body.top_n is not None and body.top_n <= 0:
        raise InvalidInput("'top_n' must be a positive integer", param="top_n")
    document_texts(body.documents)


def document_texts(documents: list[Any] | msgspec.UnsetType) -> list[str]:
    """Each document's text: a non-blank string, or an object whose ``text`` is one."""
    assert not isinstance(documents, msgspec.UnsetType)  # parse_rerank refuses a body without it
    texts: list[str] = []
    for index, document in enumerate(documents):
        text = document.get("text") if isinstance(document, dict) else document
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(
                f"documents[{index}] must be a non-empty string or an object with a non-empty string 'text'",
                param="documents",
            )
        texts.append(text)
    return texts


def score_body(body: RerankBody) -> ScoreBody:
    """The score request for the same pairs: the documents' ids are their indexes."""
    assert isinstance(body.query, str)
    items = [Item(id=str(index), text=text) for index, text in enumerate(document_texts(body.documents))]
    return ScoreBody(query=Item(text=body.query), items=items, options=body.options)


def rerank_answer(body: RerankBody, payload: dict[str, Any]) -> bytes:
    """The score service's payload (every pair, highest first) in the rerank shape."""
    texts = document_texts(body.documents)
    ranked = payload["scores"] if body.top_n is None else payload["scores"][: body.top_n]
    results = []
    for entry in ranked:
        index = int(entry["item_id"])
        result: dict[str, Any] = {"index": index, "relevance_score": entry["score"]}
        if body.return_documents:
            result["document"] = {"text": texts[index]}
        results.append(result)
    return msgspec.json.encode({"model": body.model, "results": results, "usage": payload["usage"]})
