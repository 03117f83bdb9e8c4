"""The requests the BGE-M3 parity fixture holds answers to (the tiny XLM-RoBERTa with the
M3 heads of tests/fixtures/tiny_m3.py). ``scripts/record_m3_parity.py`` computes each
answer once with FlagEmbedding's own ``BGEM3FlagModel`` (its ``encode``, and for scores its
``compute_lexical_matching_score`` and ``colbert_score`` combined as the reference server's
``score_mode`` does); the tests send the same requests to Sift, in process, over HTTP and
through the released sie-sdk."""

from __future__ import annotations

from typing import Any

MODEL = "tiny/bge-m3"
FIXTURE = "m3_reference.json"
MAX_SEQ = 24
OUTPUTS = ["dense", "sparse", "multivector"]

TEXTS = [
    "What is the capital of China?",
    # A repeated token (one sparse weight, the larger), and a character outside the
    # tiny vocabulary (<unk>, dropped from sparse like the other special tokens).
    "the capital of China is Beijing, the capital €",
    "x",
    # Longer than MAX_SEQ tokens: cut, the end token kept.
    "Gravity is a force of the bodies; gravity is the force that makes sparse bodies fall, 42 times",
]
QUERIES = ["What is the capital of China?", "Gravity force"]

# Each encode case: the request (texts, is_query, instruction, options, output_types).
# ``instruction`` reaches the reference as ``f"{instruction} {text}"``, as the reference
# server's BGE-M3 adapters prepend it.
EMBED_CASES: list[dict[str, Any]] = [
    {"name": "documents", "texts": TEXTS, "is_query": False},
    {"name": "queries", "texts": QUERIES, "is_query": True},
    {"name": "instruction", "texts": TEXTS[:2], "is_query": True, "instruction": "Find the city"},
    {"name": "not-normalized", "texts": TEXTS, "is_query": False, "options": {"normalize": False}},
]

SCORE_QUERY = "What is the capital of China?"
SCORE_DOCS = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies.",
    "Beijing",
    "the capital of the capital of the capital of what is China",
]
# The reference server's hybrid weights when the request names none.
DEFAULT_WEIGHTS = {"dense": 0.4, "sparse": 0.2, "colbert": 0.4}
SCORE_CASES: list[dict[str, Any]] = [
    {"name": "default", "query": SCORE_QUERY, "texts": SCORE_DOCS},
    {"name": "dense", "query": SCORE_QUERY, "texts": SCORE_DOCS, "options": {"score_mode": "dense"}},
    {"name": "sparse", "query": SCORE_QUERY, "texts": SCORE_DOCS, "options": {"score_mode": "sparse"}},
    {"name": "colbert", "query": SCORE_QUERY, "texts": SCORE_DOCS, "options": {"score_mode": "colbert"}},
    {"name": "hybrid", "query": SCORE_QUERY, "texts": SCORE_DOCS, "options": {"score_mode": "hybrid"}},
    {
        "name": "hybrid-weights",
        "query": SCORE_QUERY,
        "texts": SCORE_DOCS,
        "options": {"score_mode": "hybrid", "score_weights": {"dense": 1.0, "sparse": 0.5, "colbert": 0}},
    },
    {
        "name": "instruction-colbert",
        "query": SCORE_QUERY,
        "texts": SCORE_DOCS[:2],
        "instruction": "Find the city",
        "options": {"score_mode": "colbert"},
    },
]


def entry(folder: str) -> str:
    """The tiny model's catalog entry, after its name line (as the shipped bge-m3 entry)."""
    return (
        f"adapter: bge-m3\nsource:\n  path: {folder}\ntasks: [encode, score]\nbackend: torch\n"
        f"max_sequence_length: {MAX_SEQ}\n"
    )
