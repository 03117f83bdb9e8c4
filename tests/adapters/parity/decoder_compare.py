"""The decoder-family fixture, and the requests of its cases in the wire's shape."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from tests.adapters.parity.decoder_cases import FIXTURE

TOL = 1e-5


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).with_name(FIXTURE)).read_text())
    return data


def encode_body(case: dict[str, Any]) -> dict[str, Any]:
    """The native encode body of an embed case."""
    params: dict[str, Any] = {"options": {"is_query": case["is_query"], **case.get("options", {})}}
    if "instruction" in case:
        params["instruction"] = case["instruction"]
    return {"items": [{"text": text} for text in case["texts"]], "params": params}


def score_body(case: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "query": {"text": case["query"]},
        "items": [{"id": str(i), "text": t} for i, t in enumerate(case["texts"])],
    }
    if "instruction" in case:
        body["instruction"] = case["instruction"]
    return body
