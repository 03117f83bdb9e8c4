"""NLI zero-shot answers equal the released sie-server 0.10.1's on the tiny NLI
model (recorded by scripts/record_extract_parity.py into parity/extract_reference.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters.nli import NliAdapter
from tests.adapters.conftest import load_context
from tests.adapters.parity.cases import NLI_MODEL
from tests.adapters.parity.compare import assert_same, cases, recorded, sift_answer
from tests.fixtures.tiny_models import build_tiny_nli


@pytest.fixture(scope="module")
def nli(tmp_path_factory: pytest.TempPathFactory) -> NliAdapter:
    return NliAdapter.load(load_context(build_tiny_nli(tmp_path_factory.mktemp("nli"))))


@pytest.mark.parametrize("case", cases(NLI_MODEL), ids=lambda case: case["name"])
def test_answers_equal_the_reference(nli: NliAdapter, case: dict[str, Any]) -> None:
    expected = recorded()[case["name"]]
    assert all(item["classifications"] for item in expected)
    assert_same(sift_answer(nli, case), expected)


def test_every_case_was_recorded() -> None:
    assert {case["name"] for case in cases(NLI_MODEL)} <= set(recorded())
    assert Path(__file__).with_name("parity").joinpath("extract_reference.json").stat().st_size < 64_000
