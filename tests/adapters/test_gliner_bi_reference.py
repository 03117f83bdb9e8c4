"""Bi-encoder GLiNER keeps its parity: Sift's gliner adapter answers as the released
sie-server 0.10.1's bi-encoder adapter (label embeddings precomputed, as its catalog
serves them) on a tiny random bi-encoder GLiNER (recorded by
scripts/record_extract_parity.py into parity/extract_reference.json)."""

from __future__ import annotations

from typing import Any

import pytest

from sift_server.adapters.gliner.adapter import GlinerAdapter
from tests.adapters.conftest import load_context
from tests.adapters.parity.cases import GLINER_BI_MODEL
from tests.adapters.parity.compare import assert_same, cases, recorded, sift_answer
from tests.fixtures.tiny_models import build_tiny_gliner_bi


@pytest.fixture(scope="module")
def gliner_bi(tmp_path_factory: pytest.TempPathFactory) -> GlinerAdapter:
    # The reference catalog's threshold for bi-encoder GLiNER.
    return GlinerAdapter.load(load_context(build_tiny_gliner_bi(tmp_path_factory.mktemp("gliner-bi")), threshold=0.3))


def test_the_model_is_a_bi_encoder(gliner_bi: GlinerAdapter) -> None:
    assert type(gliner_bi.model).__name__.startswith("BiEncoder")


@pytest.mark.parametrize("case", cases(GLINER_BI_MODEL), ids=lambda case: case["name"])
def test_answers_equal_the_reference(gliner_bi: GlinerAdapter, case: dict[str, Any]) -> None:
    expected = recorded()[case["name"]]
    assert all(item["entities"] for item in expected)
    assert_same(sift_answer(gliner_bi, case), expected)
