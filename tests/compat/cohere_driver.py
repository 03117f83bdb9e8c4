"""Run by the compatibility venv's Python 3.12 (not by pytest): the released ``cohere``
client's (v1) ``rerank`` against one Sift URL, unchanged, black-box.

``python cohere_driver.py URL API_KEY SPEC_JSON`` prints one JSON object with what
each call returned (the client's parsed response as a dict), or the error it raised.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

QUERY = "what is a vector database?"
DOCUMENTS = ["A vector database stores embeddings.", "Bananas are yellow.", "Paris is in France."]


def _attempt(out: dict[str, Any], name: str, call: Callable[[], Any]) -> None:
    try:
        out[name] = {"ok": call().dict()}
    except Exception as exc:  # reported to the test, which decides
        out[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}


def main(url: str, api_key: str, spec: dict[str, Any]) -> dict[str, Any]:
    import cohere

    client = cohere.Client(api_key=api_key, base_url=url)
    out: dict[str, Any] = {"cohere_version": cohere.__version__, "query": QUERY, "documents": DOCUMENTS}
    model = spec["reranker"]
    _attempt(out, "strings", lambda: client.rerank(model=model, query=QUERY, documents=DOCUMENTS))
    _attempt(
        out,
        "objects_top_n",
        lambda: client.rerank(
            model=model, query=QUERY, documents=[{"text": d} for d in DOCUMENTS], top_n=2, return_documents=True
        ),
    )
    _attempt(out, "no_score_task", lambda: client.rerank(model=spec["embedder"], query=QUERY, documents=DOCUMENTS))
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))))
