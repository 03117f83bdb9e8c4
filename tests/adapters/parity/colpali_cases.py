"""The requests the ColPali-family parity fixture holds answers to (the tiny ColPali and
ColQwen2 of tests/fixtures/tiny_colpali.py). ``scripts/record_colpali_parity.py``
computes each answer once with transformers' own classes and processors, called as the
reference server calls them; the tests send the same requests to Sift, in process and
through the released sie-sdk (directly and through the gateway).

An item is ``{"text"?: str, "images"?: [index into tiny_colpali.image_bytes()]}``."""

from __future__ import annotations

from typing import Any

from tests.fixtures.tiny_colpali import QUERIES, TINY_COLPALI, TINY_COLQWEN2

FIXTURE = "colpali_reference.json"
MODELS = (TINY_COLPALI, TINY_COLQWEN2)
TOL = 1e-5

EMBED_CASES: list[dict[str, Any]] = [
    {"name": "pages", "items": [{"images": [i]} for i in range(4)], "is_query": False},
    {"name": "queries", "items": [{"text": q} for q in QUERIES], "is_query": True},
    # Several images: their sequences' vectors one after the other.
    {"name": "two-pages", "items": [{"images": [0, 1]}, {"images": [3]}], "is_query": False},
    # A document with text only is read as its text; a query with text and an image as its text.
    {"name": "mixed", "items": [{"text": "a chart"}, {"text": "ignored", "images": [2]}], "is_query": False},
    {"name": "query-with-image", "items": [{"text": QUERIES[1], "images": [2]}], "is_query": True},
]

SCORE_CASES: list[dict[str, Any]] = [
    {
        "name": "pages",
        "query": QUERIES[0],
        "items": [{"images": [0]}, {"images": [1]}, {"text": "revenue in 2023"}, {"images": [2, 3]}],
    },
    {"name": "one", "query": QUERIES[2], "items": [{"images": [3]}]},
]


def reads_as_text(item: dict[str, Any], is_query: bool) -> bool:
    """How the reference server reads an item: as its text when it is a query with
    text, or has no images; otherwise as its images."""
    return not item.get("images") or (is_query and bool(item.get("text")))
