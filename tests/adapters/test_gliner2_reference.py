"""GLiNER2 answers (entities, classification, structured data) equal the released
sie-server 0.10.1's on the tiny GLiNER2 model (recorded by
scripts/record_extract_parity.py into parity/extract_reference.json)."""

from __future__ import annotations

from typing import Any

import pytest

from sift_server.adapters.gliner2_extractor import Gliner2Adapter
from tests.adapters.conftest import load_context
from tests.adapters.parity.cases import GLINER2_MODEL
from tests.adapters.parity.compare import assert_same, cases, recorded, sift_answer
from tests.fixtures.tiny_models import build_tiny_gliner2


@pytest.fixture(scope="module")
def gliner2(tmp_path_factory: pytest.TempPathFactory) -> Gliner2Adapter:
    return Gliner2Adapter.load(load_context(build_tiny_gliner2(tmp_path_factory.mktemp("gliner2"))))


@pytest.mark.parametrize("case", cases(GLINER2_MODEL), ids=lambda case: case["name"])
def test_answers_equal_the_reference(gliner2: Gliner2Adapter, case: dict[str, Any]) -> None:
    expected = recorded()[case["name"]]
    # Each case has something to compare, so none passes vacuously.
    assert all(item["entities"] or item["classifications"] or item["data"] for item in expected)
    assert_same(sift_answer(gliner2, case), expected)
