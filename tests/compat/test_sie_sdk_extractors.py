"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) against ``sift
serve`` (tests/compat/conftest.py) on the tiny NLI, GLiNER2 and bi-encoder GLiNER
models: every parity case's answer equals the released sie-server's recorded one
(tests/adapters/parity), and a request a model cannot serve comes back as the SDK's
error, not an answer."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.parity.cases import CASES, NLI_MODEL
from tests.adapters.parity.compare import assert_same, recorded
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess

DRIVER = Path(__file__).resolve().parents[2] / "scripts" / "extract_parity_driver.py"
REFUSED = {"name": "nli-with-schema", "model": NLI_MODEL, "texts": ["x"], "output_schema": {"type": "object"}}


@pytest.fixture(scope="module")
def answers(direct: ServerProcess) -> dict[str, dict[str, Any]]:
    cases = [*CASES, REFUSED]
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), direct.url, json.dumps({"cases": cases}), KEY],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return {case["name"]: answer for case, answer in zip(cases, json.loads(done.stdout), strict=True)}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_the_sdk_gets_the_references_answers(answers: dict[str, dict[str, Any]], case: dict[str, Any]) -> None:
    answer = answers[case["name"]]
    assert "error" not in answer, answer
    assert_same(answer["items"], recorded()[case["name"]])


def test_a_schema_for_a_model_without_one_is_the_sdks_error(answers: dict[str, dict[str, Any]]) -> None:
    error = answers[REFUSED["name"]]["error"]
    assert "output_schema" in error
