"""The released ``sie-sdk`` 0.10.1 extracts from images with Sift's Florence-2, Donut,
LightOnOCR-2, PaddleOCR-VL, GLM-OCR and MinerU2.5 unchanged: on the tiny models through ``sift
serve`` (tests/compat/conftest.py, with an API key) it gets the entities and objects
transformers' own classes answered (tests/fixtures/florence2_parity.json,
donut_parity.json, lighton_ocr_parity.json, paddleocr_vl_parity.json,
glm_ocr_parity.json, mineru_parity.json), and a task Sift does not run is the SDK's
error, a 400 on the wire. GLM-OCR and MinerU2.5 also answer the same through a gateway
and its worker."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sift_server.cluster.local import LocalCluster
from tests.adapters import test_donut, test_florence2, test_glm_ocr, test_lighton_ocr, test_mineru, test_paddleocr_vl
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_detection import detection_images
from tests.fixtures.tiny_donut import TINY_DONUT, donut_cases
from tests.fixtures.tiny_florence2 import TINY_FLORENCE2, florence2_cases
from tests.fixtures.tiny_glm_ocr import TINY_GLM_OCR, glm_ocr_cases
from tests.fixtures.tiny_lighton_ocr import TINY_LIGHTON_OCR, lighton_ocr_cases
from tests.fixtures.tiny_mineru import TINY_MINERU, mineru_cases
from tests.fixtures.tiny_paddleocr_vl import TINY_PADDLEOCR_VL, paddleocr_vl_cases

DRIVER = Path(__file__).with_name("detection_driver.py")
FLORENCE2 = [c for c in florence2_cases() if c["name"] in ("caption", "od", "ocr-with-region", "docvqa-instruction")]
DONUT = [c for c in donut_cases() if c["name"] in ("cord", "docvqa")]
# The OCR models: (prefix, model, cases, their recorded answers).
OCR: list[tuple[str, str, dict[str, Any], Callable[[], dict[str, list[dict[str, Any]]]]]] = [
    ("lighton-ocr", TINY_LIGHTON_OCR, c, test_lighton_ocr.recorded)
    for c in lighton_ocr_cases()
    if c["name"] in ("catalog-default", "instruction")
] + [
    ("paddleocr-vl", TINY_PADDLEOCR_VL, c, test_paddleocr_vl.recorded)
    for c in paddleocr_vl_cases()
    if c["name"] in ("table", "instruction")
]
GATEWAY_OCR = [
    ("glm-ocr", TINY_GLM_OCR, c, test_glm_ocr.recorded)
    for c in glm_ocr_cases()
    if c["name"] in ("catalog-default", "instruction")
] + [("mineru", TINY_MINERU, c, test_mineru.recorded) for c in mineru_cases() if c["name"] in ("layout", "instruction")]
OCR += GATEWAY_OCR
UNSERVED_TASK = {
    "name": "florence2:unserved-task",
    "model": TINY_FLORENCE2,
    "labels": [],
    "options": {"task": "<MORE_DETAILED_CAPTION>"},
    "images": ["wide_png"],
}


def _sent(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entities without the keys the SDK fills in as None (``start``, ``end``, ``bbox``) where
    the wire carried none."""
    return [{key: value for key, value in entity.items() if value is not None} for entity in entities]


def _wire(case: dict[str, Any], model: str, prefix: str) -> dict[str, Any]:
    images = []
    for name in case["images"]:
        data, fmt = detection_images()[name]
        images.append({"data": base64.b64encode(data).decode(), "format": fmt})
    return {**case, "name": f"{prefix}:{case['name']}", "model": model, "labels": [], "images": images}


def _drive(url: str, cases: list[dict[str, Any]]) -> dict[str, Any]:
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, KEY],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("sie_sdk_version") == "0.10.1"
    return result


@pytest.fixture(scope="module")
def answers(direct: ServerProcess) -> dict[str, Any]:
    cases = [_wire(c, TINY_FLORENCE2, "florence2") for c in FLORENCE2]
    cases += [_wire(c, TINY_DONUT, "donut") for c in DONUT]
    cases += [_wire(c, model, prefix) for prefix, model, c, _ in OCR]
    cases.append(_wire(UNSERVED_TASK, TINY_FLORENCE2, "florence2") | {"name": UNSERVED_TASK["name"]})
    return _drive(direct.url, cases)


@pytest.fixture(scope="module")
def gateway_answers(gateway: LocalCluster) -> dict[str, Any]:
    cases = [_wire(c, model, prefix) for prefix, model, c, _ in GATEWAY_OCR]
    first = GATEWAY_OCR[0][2]
    too_many_beams = {**first, "name": "too-many-beams", "options": {"num_beams": 99}, "images": ["wide_png"]}
    cases.append(_wire(too_many_beams, TINY_GLM_OCR, "glm-ocr"))
    unknown_task = {**too_many_beams, "name": "unknown-task", "options": {"task": "ocr"}}
    cases.append(_wire(unknown_task, TINY_MINERU, "mineru"))
    return _drive(gateway.url, cases)


@pytest.mark.parametrize("case", FLORENCE2, ids=lambda case: case["name"])
def test_the_sdk_gets_florence2s_recorded_answers(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers[f"florence2:{case['name']}"]
    assert got["raw"] == {"status": 200}
    assert "error" not in got, got["error"]
    for index, want in enumerate(test_florence2.recorded()[case["name"]]):
        assert _sent(got["entities"][index]) == want["entities"], index
        assert got["objects"][index] == want["objects"], index


@pytest.mark.parametrize("case", DONUT, ids=lambda case: case["name"])
def test_the_sdk_gets_donuts_recorded_entities(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers[f"donut:{case['name']}"]
    assert got["raw"] == {"status": 200}
    assert "error" not in got, got["error"]
    assert [_sent(entities) for entities in got["entities"]] == [
        want["entities"] for want in test_donut.recorded()[case["name"]]
    ]


@pytest.mark.parametrize("ocr", OCR, ids=lambda ocr: f"{ocr[0]}:{ocr[2]['name']}")
def test_the_sdk_gets_the_ocr_models_recorded_entities(
    answers: dict[str, Any], ocr: tuple[str, str, dict[str, Any], Callable[[], dict[str, list[dict[str, Any]]]]]
) -> None:
    prefix, _, case, recorded = ocr
    got = answers[f"{prefix}:{case['name']}"]
    assert got["raw"] == {"status": 200}
    assert "error" not in got, got["error"]
    assert [_sent(entities) for entities in got["entities"]] == [want["entities"] for want in recorded()[case["name"]]]


def test_a_task_sift_does_not_run_is_the_sdks_error(answers: dict[str, Any]) -> None:
    got = answers[UNSERVED_TASK["name"]]
    assert got["raw"] == {"status": 400, "code": "INVALID_INPUT"}
    assert "<MORE_DETAILED_CAPTION>" in got["error"]


@pytest.mark.parametrize("ocr", GATEWAY_OCR, ids=lambda ocr: f"{ocr[0]}:{ocr[2]['name']}")
def test_the_sdk_gets_glm_ocr_and_minerus_recorded_entities_through_the_gateway(
    gateway_answers: dict[str, Any],
    ocr: tuple[str, str, dict[str, Any], Callable[[], dict[str, list[dict[str, Any]]]]],
) -> None:
    prefix, _, case, recorded = ocr
    got = gateway_answers[f"{prefix}:{case['name']}"]
    assert got["raw"] == {"status": 200}
    assert "error" not in got, got["error"]
    assert [_sent(entities) for entities in got["entities"]] == [want["entities"] for want in recorded()[case["name"]]]


def test_a_bad_option_through_the_gateway_is_the_sdks_error(gateway_answers: dict[str, Any]) -> None:
    got = gateway_answers["glm-ocr:too-many-beams"]
    assert got["raw"] == {"status": 400, "code": "INVALID_INPUT"}
    assert "num_beams" in got["error"]
    got = gateway_answers["mineru:unknown-task"]
    assert got["raw"] == {"status": 400, "code": "INVALID_INPUT"}
    assert "[layout]" in got["error"]
