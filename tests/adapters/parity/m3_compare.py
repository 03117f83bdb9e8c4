"""The BGE-M3 fixture, one item's comparison, and the requests of its cases in the wire's shape."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tests.adapters.parity.m3_cases import FIXTURE, OUTPUTS

TOL = 1e-5


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).with_name(FIXTURE)).read_text())
    return data


def assert_item_equals(got: dict[str, Any], expected: dict[str, Any], index: int) -> None:
    """``got``: one item's ``dense`` (vector), ``sparse`` ((indices, values)) and
    ``multivector`` (tokens x dims); ``expected``: the case's recorded answers. Sparse
    token ids must match exactly, in order; every number within ``TOL``."""
    np.testing.assert_allclose(np.asarray(got["dense"]), expected["dense"][index], atol=TOL, rtol=0)
    indices, values = got["sparse"]
    assert [int(i) for i in indices] == expected["sparse"][index]["indices"]
    np.testing.assert_allclose(np.asarray(values), expected["sparse"][index]["values"], atol=TOL, rtol=0)
    multivector = np.asarray(got["multivector"])
    assert multivector.shape == np.asarray(expected["multivector"][index]).shape
    np.testing.assert_allclose(multivector, expected["multivector"][index], atol=TOL, rtol=0)


def encode_body(case: dict[str, Any]) -> dict[str, Any]:
    """The native encode body of an embed case (every output asked for)."""
    params: dict[str, Any] = {
        "output_types": OUTPUTS,
        "options": {"is_query": case["is_query"], **case.get("options", {})},
    }
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
    if "options" in case:
        body["options"] = case["options"]
    return body
