"""Sift's answers to the parity cases against the reference's recorded ones:
labels, entity spans, order and data equal, scores within ``TOL``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from sift_server.adapters.base import Adapter, Part
from sift_server.service.extract_options import extract_task
from tests.adapters.parity.cases import CASES, FIXTURE

TOL = 1e-5
_ENTITY_KEYS = ("text", "label", "start", "end")


def recorded() -> dict[str, list[dict[str, Any]]]:
    answers: dict[str, list[dict[str, Any]]] = json.loads(Path(__file__).with_name(FIXTURE).read_text())["answers"]
    return answers


def cases(model: str) -> list[dict[str, Any]]:
    return [case for case in CASES if case["model"] == model]


def sift_answer(adapter: Adapter, case: dict[str, Any]) -> list[dict[str, Any]]:
    """The adapter's items for one case, its options typed as the service types them."""
    task = extract_task(list(case["texts"]), case.get("labels") or [], case.get("options") or {}, None, "truncate")
    task = replace(task, output_schema=case.get("output_schema"))
    prepared = adapter.prepare(task)
    items: list[dict[str, Any]] = adapter.forward([Part(prepared, 0, len(case["texts"]))])[0]
    return items


def assert_same(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        got_classes, want_classes = got["classifications"], want["classifications"] or []
        assert [c["label"] for c in got_classes] == [c["label"] for c in want_classes]
        for a, b in zip(got_classes, want_classes, strict=True):
            assert abs(a["score"] - b["score"]) <= TOL, (a, b)
        got_entities, want_entities = got["entities"], want["entities"] or []
        assert [[e[k] for k in _ENTITY_KEYS] for e in got_entities] == [
            [e[k] for k in _ENTITY_KEYS] for e in want_entities
        ]
        for a, b in zip(got_entities, want_entities, strict=True):
            assert abs(a["score"] - b["score"]) <= TOL, (a, b)
        assert (got["data"] or {}) == (want["data"] or {})
