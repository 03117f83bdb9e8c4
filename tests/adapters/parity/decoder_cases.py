"""The requests the decoder-family parity fixture holds answers to (the tiny Qwen3
embedder and reranker of tests/fixtures/tiny_decoder.py). ``scripts/record_decoder_parity.py``
computes each answer once with the reference library's own call (sentence-transformers
for the embedder, a plain transformers forward for the reranker); the tests send the
same requests to Sift, in process, over HTTP and through the released sie-sdk."""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.tiny_decoder import MATRYOSHKA_MIN_DIM, MISTRAL_QUERY_TEMPLATE, QUERY_INSTRUCTION, QUERY_TEMPLATE

EMBEDDER = "tiny/qwen3-embedder"
RERANKER = "tiny/qwen3-reranker"
FIXTURE = "decoder_reference.json"
MAX_SEQ = 64

TEXTS = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
    "x",
    # Longer than MAX_SEQ byte-level tokens: truncated, the end token kept.
    "Retrieval models read a long passage like this one, which goes on for well over sixty-four tokens.",
]
QUERIES = ["What is the capital of China?", "Explain gravity"]


def embedder_entry(folder: str) -> str:
    """The tiny embedder's catalog entry, after its name line (as the shipped Qwen3 entries)."""
    return (
        f"adapter: decoder-embedder\nsource:\n  path: {folder}\ntasks: [encode]\nbackend: torch\n"
        f"max_sequence_length: {MAX_SEQ}\noptions:\n"
        # A JSON string is a YAML double-quoted scalar: the template's newline survives.
        f"  query_template: {json.dumps(QUERY_TEMPLATE)}\n"
        f"  default_instruction: {QUERY_INSTRUCTION}\n"
        f"  matryoshka_min_dim: {MATRYOSHKA_MIN_DIM}\n"
    )


def reranker_entry(folder: str) -> str:
    return (
        f"adapter: llm-reranker\nsource:\n  path: {folder}\ntasks: [score]\nbackend: torch\nmax_sequence_length: 512\n"
    )


# Each embed case: the request (texts, is_query, instruction, options) and how the
# reference library is called for it (prompt, normalize, truncate_dim).
EMBED_CASES: list[dict[str, Any]] = [
    {"name": "documents", "texts": TEXTS, "is_query": False, "prompt": ""},
    {
        "name": "queries-default-instruction",
        "texts": QUERIES,
        "is_query": True,
        "prompt": f"Instruct: {QUERY_INSTRUCTION}\nQuery:",
    },
    {
        "name": "queries-instruction",
        "texts": QUERIES,
        "is_query": True,
        "instruction": "Find the city",
        "prompt": "Instruct: Find the city\nQuery:",
    },
    {
        "name": "queries-options-instruction",
        "texts": QUERIES[:1],
        "is_query": True,
        "options": {"instruction": "Name the force"},
        "prompt": "Instruct: Name the force\nQuery:",
    },
    {
        "name": "documents-instruction",
        "texts": TEXTS[:2],
        "is_query": False,
        "instruction": "Represent this passage",
        "prompt": "Represent this passage ",
    },
    {
        "name": "documents-not-normalized",
        "texts": TEXTS,
        "is_query": False,
        "options": {"normalize": False},
        "prompt": "",
    },
    {
        "name": "queries-matryoshka-16",
        "texts": QUERIES,
        "is_query": True,
        "options": {"dimensions": 16},
        "prompt": f"Instruct: {QUERY_INSTRUCTION}\nQuery:",
        "truncate_dim": 16,
    },
]

RERANK_QUERY = "What is the capital of China?"
RERANK_DOCS = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
    "Beijing",
    "A much longer document about cities, rivers and mountains " * 12,
]
SCORE_CASES: list[dict[str, Any]] = [
    {"name": "default-instruction", "query": RERANK_QUERY, "texts": RERANK_DOCS},
    {"name": "instruction", "query": RERANK_QUERY, "texts": RERANK_DOCS[:3], "instruction": "Judge geography"},
]


# ---- the reference catalog's other decoder families (tests/fixtures/tiny_decoder.py) ----
# Recorded by scripts/record_decoder_families_parity.py into FAMILIES_FIXTURE.
FAMILIES_FIXTURE = "decoder_families_reference.json"
MISTRAL_EMBEDDER = "tiny/mistral-embedder"
MXBAI_RERANKER = "tiny/mxbai-reranker"
# Shorter than QUERY_INSTRUCTION, so that a query's own words fit in MAX_SEQ tokens after it.
MISTRAL_INSTRUCTION = "Retrieve passages"


def mistral_embedder_entry(folder: str) -> str:
    """The tiny Mistral embedder's entry, after its name line (as the shipped Linq / SFR / e5-mistral entries)."""
    return (
        f"adapter: decoder-embedder\nsource:\n  path: {folder}\ntasks: [encode]\nbackend: torch\n"
        f"max_sequence_length: {MAX_SEQ}\noptions:\n"
        f"  query_template: {json.dumps(MISTRAL_QUERY_TEMPLATE)}\n"
        f"  default_instruction: {MISTRAL_INSTRUCTION}\n"
        "  append_eos: true\n"
        "  normalize: true\n"
    )


def mxbai_reranker_entry(folder: str) -> str:
    return (
        f"adapter: llm-reranker\nsource:\n  path: {folder}\ntasks: [score]\nbackend: torch\nmax_sequence_length: 512\n"
        "options:\n  input_format: mxbai\n"
    )


# Each case: the request, and the texts the reference (its template, then "</s>") hands the library.
MISTRAL_EMBED_CASES: list[dict[str, Any]] = [
    {"name": "documents", "texts": TEXTS, "is_query": False, "library_texts": [t + "</s>" for t in TEXTS]},
    {
        "name": "queries-default-instruction",
        "texts": QUERIES,
        "is_query": True,
        "library_texts": [f"Instruct: {MISTRAL_INSTRUCTION}\nQuery: {q}</s>" for q in QUERIES],
    },
    {
        "name": "queries-instruction",
        "texts": QUERIES,
        "is_query": True,
        "instruction": "Find the city",
        "library_texts": [f"Instruct: Find the city\nQuery: {q}</s>" for q in QUERIES],
    },
    {
        "name": "documents-not-normalized",
        "texts": TEXTS[:2],
        "is_query": False,
        "options": {"normalize": False},
        "library_texts": [t + "</s>" for t in TEXTS[:2]],
    },
]
# The reference server ignores an instruction under the mxbai format: the "instruction" case's
# answer is the library's without one.
MXBAI_SCORE_CASES: list[dict[str, Any]] = [
    {"name": "default", "query": RERANK_QUERY, "texts": RERANK_DOCS},
    {"name": "instruction", "query": RERANK_QUERY, "texts": RERANK_DOCS[:3], "instruction": "Judge geography"},
]


# ---- zerank-2 (tests/fixtures/tiny_decoder.py build_tiny_zerank) ----
# Recorded from sie-server 0.10.1's own native_causal_cross_encoder adapter through sie-sdk
# (scripts/record_zerank_parity.py) into ZERANK_FIXTURE.
ZERANK_FIXTURE = "zerank_reference.json"
ZERANK_RERANKER = "tiny/zerank"
ZERANK_MAX_SEQ = 256


def zerank_entry(folder: str) -> str:
    return (
        f"adapter: llm-reranker\nsource:\n  path: {folder}\ntasks: [score]\nbackend: torch\n"
        f"max_sequence_length: {ZERANK_MAX_SEQ}\noptions:\n  input_format: zerank\n"
    )


ZERANK_DOCS = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
    "Beijing",
    # Rows of different lengths share a forward, padded on the left.
    "A longer document about cities, rivers and mountains, " * 3,
]
# Each case: the request; "error" cases are answered 400 by the reference (its message recorded).
ZERANK_SCORE_CASES: list[dict[str, Any]] = [
    {"name": "pairs", "query": RERANK_QUERY, "texts": ZERANK_DOCS},
    {"name": "unicode", "query": "東京はどこ? Where is Tokyo?", "texts": ["東京は日本の首都です。", "x", " spaces "]},
    {"name": "max-seq-length", "query": RERANK_QUERY, "texts": ZERANK_DOCS[:3], "options": {"max_seq_length": 128}},
    {"name": "instruction", "query": RERANK_QUERY, "texts": ZERANK_DOCS[:2], "instruction": "Judge geography"},
    # The whole row is over the entry's limit: refused, never cut.
    {"name": "too-long", "query": RERANK_QUERY, "texts": ["short", "far too long for the limit " * 12]},
    {"name": "too-long-for-the-option", "query": RERANK_QUERY, "texts": ZERANK_DOCS, "options": {"max_seq_length": 64}},
]
