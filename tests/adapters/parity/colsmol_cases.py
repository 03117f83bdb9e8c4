"""The requests the colSmol parity fixture holds answers to (the tiny colSmol of
tests/fixtures/tiny_colsmol.py): the colpali-engine layout's cases (colvision_cases.py,
the same queries and four page images by index), answered once by
``scripts/record_colsmol_parity.py`` with colpali-engine's own ``ColIdefics3`` and
``ColIdefics3Processor``; the tests send the same requests to Sift, in process and over HTTP."""

from __future__ import annotations

from tests.adapters.parity.colvision_cases import (
    EMBED_CASES,
    RECORDED_CASES,
    SCORE_CASES,
    TOL,
    expected_items,
    reads_as_text,
)
from tests.fixtures.tiny_colsmol import QUERIES, TINY_COLSMOL
from tests.fixtures.tiny_colvision import QUERIES as COLVISION_QUERIES

FIXTURE = "colsmol_reference.json"
MODELS = (TINY_COLSMOL,)
# expected_items finds a query's vectors by its text among these.
assert QUERIES == COLVISION_QUERIES

__all__ = [
    "EMBED_CASES",
    "FIXTURE",
    "MODELS",
    "RECORDED_CASES",
    "SCORE_CASES",
    "TOL",
    "expected_items",
    "reads_as_text",
]
