"""The requests the Qwen3-VL parity fixture holds answers to (the tiny Qwen3-VL embedder
and reranker of tests/fixtures/tiny_qwen3_vl.py). ``scripts/record_qwen3_vl_parity.py``
computes each answer once with transformers' own classes, called as the reference server
(sie-server 0.10.1) calls them; the tests send the same requests to Sift.

An item is ``{"text"?: str, "images"?: [index into tiny_colpali.image_bytes()]}``."""

from __future__ import annotations

from typing import Any

FIXTURE = "qwen3_vl_reference.json"
TOL = 1e-5

EMBED_CASES: list[dict[str, Any]] = [
    {"name": "texts", "items": [{"text": "the quick brown fox"}, {"text": "Où est la table 3 ?"}, {"text": "x"}]},
    {"name": "pages", "items": [{"images": [0]}, {"images": [1]}, {"images": [2]}, {"images": [3]}]},
    {"name": "text-and-image", "items": [{"text": "a red chart", "images": [0]}, {"text": "a chart"}]},
    {"name": "two-images", "items": [{"images": [1, 3]}, {"text": "after", "images": [2, 0]}]},
    # The instruction gets a final period unless it ends in punctuation.
    {"name": "instruction", "items": [{"text": "revenue 2023"}], "instruction": "Find the page that answers"},
    {"name": "instruction-punct", "items": [{"text": "revenue 2023"}], "instruction": "  Find the page?  "},
]

LONG_TEXT = "The annual report lists revenue, costs and the outlook for each region. " * 6
# The reranker: a text query against candidates; ``max_seq_length`` trims the long
# candidate's text (what the reference does past its limit).
SCORE_CASES: list[dict[str, Any]] = [
    {
        "name": "texts",
        "query": "what is the revenue in 2023?",
        "items": [{"text": "Revenue in 2023 was 4 million."}, {"text": "A recipe for soup."}, {"text": "x"}],
    },
    {
        "name": "pages",
        "query": "a red chart",
        "items": [{"images": [0]}, {"images": [1]}, {"text": "the chart, in red", "images": [3]}],
    },
    {"name": "instruction", "query": "soup", "items": [{"text": "A recipe for soup."}], "instruction": "Find recipes"},
    {
        "name": "trimmed",
        "query": "outlook",
        "items": [{"text": LONG_TEXT}, {"text": "short", "images": [2]}, {"text": LONG_TEXT, "images": [2]}],
        "max_seq_length": 480,
    },
]
