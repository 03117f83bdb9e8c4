"""The requests the TopK-Embed parity fixture holds answers to (the tiny folder of
tests/fixtures/tiny_topk.py). ``scripts/record_topk_parity.py`` asks the reference server's
own ``topk_embed`` adapter (sie-server 0.10.1, CPU, float32) once; the tests send the same
requests to Sift, in process, over HTTP and through the released sie-sdk.

An item is ``{"text"?: str, "images"?: [index into tiny_topk.topk_images()]}``."""

from __future__ import annotations

from typing import Any

from tests.fixtures.tiny_topk import DOCUMENTS, QUERIES, TINY_TOPK

FIXTURE = "topk_reference.json"
MODEL = TINY_TOPK
TOL = 1e-5

EMBED_CASES: list[dict[str, Any]] = [
    {"name": "queries", "items": [{"text": q} for q in QUERIES], "is_query": True, "options": {}},
    {"name": "documents", "items": [{"text": d} for d in DOCUMENTS], "is_query": False, "options": {}},
    {"name": "pages", "items": [{"images": [i]} for i in range(4)], "is_query": False, "options": {}},
    # Several pages on one item: their vectors one after the other; an item's text beside its images is not read.
    {
        "name": "two-pages-and-text",
        "items": [{"images": [0, 2]}, {"text": DOCUMENTS[0]}, {"text": "ignored", "images": [3]}],
        "is_query": False,
        "options": {},
    },
    {
        "name": "unnormalized",
        "items": [{"text": QUERIES[0]}, {"text": QUERIES[1]}],
        "is_query": True,
        "options": {"normalize": False},
    },
    {
        "name": "unnormalized-pages",
        "items": [{"images": [1]}, {"text": DOCUMENTS[1]}],
        "is_query": False,
        "options": {"normalize": False},
    },
]

SCORE_CASES: list[dict[str, Any]] = [
    {
        "name": "mixed",
        "query": QUERIES[0],
        "items": [{"images": [0]}, {"text": DOCUMENTS[0]}, {"images": [1, 3]}, {"text": DOCUMENTS[2]}],
    },
    {"name": "one", "query": QUERIES[1], "items": [{"images": [2]}]},
]
