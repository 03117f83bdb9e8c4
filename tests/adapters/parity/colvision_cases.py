"""The requests the colpali-engine-layout parity fixture holds answers to (the tiny
ColQwen2.5 of tests/fixtures/tiny_colvision.py). ``scripts/record_colvision_parity.py``
computes each answer once with colpali-engine's own processor and model; the tests send
the same requests to Sift, in process and over HTTP.

An item is ``{"text"?: str, "images"?: [index into tiny_colvision.colvision_images()]}``."""

from __future__ import annotations

from typing import Any

from tests.fixtures.tiny_colvision import QUERIES, TINY_COLQWEN2_5

FIXTURE = "colvision_reference.json"
MODELS = (TINY_COLQWEN2_5,)
TOL = 1e-5

EMBED_CASES: list[dict[str, Any]] = [
    {"name": "pages", "items": [{"images": [i]} for i in range(4)], "is_query": False},
    {"name": "queries", "items": [{"text": q} for q in QUERIES], "is_query": True},
    # Several images: their sequences' vectors one after the other.
    {"name": "two-pages", "items": [{"images": [0, 1]}, {"images": [3]}], "is_query": False},
    # A document with text only is read as its text (a query); a query with text and an image as its text.
    {"name": "mixed", "items": [{"text": QUERIES[1]}, {"text": "ignored", "images": [2]}], "is_query": False},
    {"name": "query-with-image", "items": [{"text": QUERIES[1], "images": [2]}], "is_query": True},
]

# The cases whose vectors the fixture stores: every other case's answer is these vectors
# arranged as colpali-engine's calls give them (a text alone is its query; an image's row does
# not depend on what shares its batch, which the recording checks), see ``expected_items``.
RECORDED_CASES = ("pages", "queries")


def expected_items(recorded: dict[str, list[Any]], case: dict[str, Any]) -> list[Any]:
    """A case's answer from the recorded pages (image ``i`` is ``pages[i]``) and queries (by text)."""
    import numpy as np

    by_text = {q: recorded["queries"][i] for i, q in enumerate(QUERIES)}
    out = []
    for item in case["items"]:
        if reads_as_text(item, case["is_query"]):
            out.append(by_text[item["text"]])
        else:
            out.append(np.concatenate([recorded["pages"][i] for i in item["images"]]))
    return out


def reads_as_text(item: dict[str, Any], is_query: bool) -> bool:
    return not item.get("images") or (is_query and bool(item.get("text")))


SCORE_CASES: list[dict[str, Any]] = [
    {
        "name": "pages",
        "query": QUERIES[0],
        "items": [{"images": [0]}, {"images": [1]}, {"text": QUERIES[3]}, {"images": [2, 3]}],
    },
    {"name": "one", "query": QUERIES[2], "items": [{"images": [3]}]},
]
