"""docs/models.md's table of the reference catalog's model families stays true: it
covers the reference's 213 models, every row says served, not yet, out of scope or
not applicable, and a served row names only adapters Sift has."""

from __future__ import annotations

import re
from pathlib import Path

from sift_server.adapters.records import RECORDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"
# The reference server 0.10.1's catalog holds this many models.
REFERENCE_MODELS = 213
_VERDICTS = ("served", "not yet", "out of scope", "not applicable")


def family_rows() -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## The reference catalog's model families", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| family")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows if not set(row) <= set("|- ")]


def test_the_table_covers_the_reference_catalog() -> None:
    rows = family_rows()
    assert len(rows) >= 15
    assert sum(int(row[1]) for row in rows) == REFERENCE_MODELS


def test_every_row_has_a_verdict_and_served_rows_name_real_adapters() -> None:
    for family, _, _, sift in family_rows():
        assert sift.startswith(_VERDICTS), family
        if sift.startswith("served"):
            named = set(re.findall(r"\(`([a-z0-9-]+)`", sift))
            assert named, f"{family}: a served row names its Sift adapter"
            assert named <= set(RECORDS), family


def test_the_served_count_is_the_served_rows_sum() -> None:
    served = sum(int(row[1]) for row in family_rows() if row[3].startswith("served"))
    assert f"Rows marked served hold {served} of the {REFERENCE_MODELS} models" in DOC.read_text(encoding="utf-8")
