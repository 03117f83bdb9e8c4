"""The requests the extract parity fixtures hold answers to (NLI and GLiNER2 on
the tiny models of tests/fixtures/tiny_models.py). ``scripts/record_extract_parity.py``
sends them to the released sie-server and records its answers; the tests send
them to Sift and compare."""

from __future__ import annotations

from typing import Any

NLI_MODEL = "tiny/nli"
GLINER2_MODEL = "tiny/gliner2"
GLINER_BI_MODEL = "tiny/gliner-bi"
FIXTURE = "extract_reference.json"

_TEXTS = [
    "I loved this movie, the actors were great.",
    "The stock market crashed today and investors panicked.",
    "Rain is expected tomorrow afternoon",
]
_NER_TEXTS = ["Marie Curie was born in Warsaw and worked in Paris.", "Apple sold phones in Berlin in 2024."]
# Three fields: the library would order them by string hash (see the gliner2 adapter).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "who it is about"},
        "places": {"type": "array", "items": {"type": "string"}},
        "kind": {"type": "string", "enum": ["person", "company"]},
    },
}

CASES: list[dict[str, Any]] = [
    {"name": "nli-single", "model": NLI_MODEL, "texts": _TEXTS, "labels": ["positive", "finance", "sports", "weather"]},
    {
        "name": "nli-multi",
        "model": NLI_MODEL,
        "texts": _TEXTS,
        "labels": ["positive", "finance", "sports", "weather"],
        "options": {"multi_label": True},
    },
    {"name": "nli-one-label", "model": NLI_MODEL, "texts": _TEXTS[:2], "labels": ["finance"]},
    {
        "name": "nli-template",
        "model": NLI_MODEL,
        "texts": _TEXTS[1:],
        "labels": ["money", "nature"],
        "options": {"hypothesis_template": "The topic is {}!"},
    },
    {"name": "gliner2-entities", "model": GLINER2_MODEL, "texts": _NER_TEXTS, "labels": ["person", "city"]},
    {
        "name": "gliner2-entities-one-text",
        "model": GLINER2_MODEL,
        "texts": _NER_TEXTS[:1],
        "labels": ["organization"],
        "options": {"threshold": 0.51},
    },
    {
        "name": "gliner2-classify",
        "model": GLINER2_MODEL,
        "texts": _TEXTS,
        "labels": ["positive", "finance", "weather"],
        "options": {"classification_task": "topic", "threshold": 0.0},
    },
    {
        "name": "gliner2-classify-multi",
        "model": GLINER2_MODEL,
        "texts": _TEXTS,
        "labels": ["positive", "finance", "weather"],
        "options": {"classification_task": "topic", "multi_label": True, "threshold": 0.3},
    },
    {"name": "gliner2-structure", "model": GLINER2_MODEL, "texts": _NER_TEXTS, "output_schema": SCHEMA},
    {
        "name": "gliner2-structure-one-field",
        "model": GLINER2_MODEL,
        "texts": _NER_TEXTS,
        "output_schema": {"type": "object", "properties": {"cities": {"type": "array", "items": {"type": "string"}}}},
        "options": {"threshold": 0.4},
    },
    {"name": "gliner-bi-entities", "model": GLINER_BI_MODEL, "texts": _NER_TEXTS, "labels": ["person", "city"]},
    {
        "name": "gliner-bi-flat-off",
        "model": GLINER_BI_MODEL,
        "texts": _NER_TEXTS[:1],
        "labels": ["person", "organization", "date"],
        "options": {"flat_ner": False, "threshold": 0.5},
    },
]
