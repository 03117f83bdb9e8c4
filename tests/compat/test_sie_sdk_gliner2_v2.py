"""The released ``sie-sdk`` 0.10.1 against ``sift serve`` (tests/compat/conftest.py) on the tiny
GLiNER2 2.x model: every case's entities equal gliner2 2.0.0's own recorded answer
(tests/fixtures/gliner2_v2_parity.json), and a request the model cannot serve comes back as the
SDK's error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_gliner2_v2 import assert_same
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_gliner2_v2 import CASES, MODEL

DRIVER = Path(__file__).resolve().parents[2] / "scripts" / "extract_parity_driver.py"
REFUSED = [
    {"name": "schema", "model": MODEL, "texts": ["Anna lives in Rome."], "output_schema": {"type": "object"}},
    {"name": "no-labels", "model": MODEL, "texts": ["Anna lives in Rome."], "labels": []},
    {"name": "too-long", "model": MODEL, "texts": ["word " * 5000], "labels": ["person"]},
]


def _spec(case: dict[str, Any]) -> dict[str, Any]:
    options = {} if case["threshold"] is None else {"threshold": case["threshold"]}
    return {"model": MODEL, "texts": case["texts"], "labels": case["labels"], "options": options}


@pytest.fixture(scope="module")
def answers(direct: ServerProcess) -> dict[str, dict[str, Any]]:
    cases = [_spec(case) for case in CASES] + REFUSED
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), direct.url, json.dumps({"cases": cases}), KEY],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    names = [case["name"] for case in CASES] + [case["name"] for case in REFUSED]
    return dict(zip(names, json.loads(done.stdout), strict=True))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_the_sdk_gets_the_librarys_entities(answers: dict[str, dict[str, Any]], case: dict[str, Any]) -> None:
    answer = answers[case["name"]]
    assert "error" not in answer, answer
    assert_same(answer["items"], case)


@pytest.mark.parametrize(("name", "says"), [("schema", "output_schema"), ("no-labels", "labels"), ("too-long", "")])
def test_what_the_model_cannot_serve_is_the_sdks_error(
    answers: dict[str, dict[str, Any]], name: str, says: str
) -> None:
    assert says in answers[name]["error"]
