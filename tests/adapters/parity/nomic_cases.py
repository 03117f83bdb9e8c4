"""The Nomic parity cases: what scripts/record_nomic_parity.py asked the reference and
what the tests ask Sift (tests/adapters/test_nomic_native.py, over HTTP and in process)."""

from __future__ import annotations

from typing import Any

FIXTURE = "nomic_reference.json"
TOL = 1e-5
# The reference catalog's entry (sie_server/models/nomic-ai__nomic-embed-text-v1.5.yaml).
QUERY_PREFIX = "search_query: "
DOCUMENT_PREFIX = "search_document: "

LONG = " ".join(["The quick brown fox jumps over the lazy dog while the river runs to the sea."] * 4)

CASES: list[dict[str, Any]] = [
    {
        "name": "documents",
        "is_query": False,
        "normalize": True,
        "texts": ["Paris is the capital of France.", "Rotary embeddings rotate pairs of dimensions.", "hi"],
    },
    {
        "name": "queries",
        "is_query": True,
        "normalize": True,
        "texts": ["capital of France", "what is a rotary embedding?"],
    },
    {
        "name": "documents_raw",
        "is_query": False,
        "normalize": False,
        "texts": ["Paris is the capital of France.", "Short."],
    },
    {"name": "queries_raw", "is_query": True, "normalize": False, "texts": ["capital of France"]},
    {"name": "truncated", "is_query": False, "normalize": True, "texts": [LONG, "A few words only."]},
]


def formatted(case: dict[str, Any]) -> list[str]:
    prefix = QUERY_PREFIX if case["is_query"] else DOCUMENT_PREFIX
    return [prefix + text for text in case["texts"]]
