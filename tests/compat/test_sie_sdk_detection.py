"""The released ``sie-sdk`` 0.10.1 sends images to Sift's detection models unchanged:
OWLv2 and Grounding DINO on the tiny models through ``sift serve``
(tests/compat/conftest.py, with an API key) answer the objects transformers' own
classes answered (tests/fixtures/detection_parity.json), and a text item sent to an
image model is the SDK's error, a 400 on the wire."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_detection import assert_objects_equal, recorded
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.detection_cases import detection_cases, image_bytes
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_detection import TINY_OWLV2

DRIVER = Path(__file__).with_name("detection_driver.py")
TEXT_ITEM = {"name": "owlv2:text-item", "model": TINY_OWLV2, "labels": ["cat"], "options": {}, "texts": ["a cat"]}


def _wire(case: dict[str, Any]) -> dict[str, Any]:
    images = []
    for name in case["images"]:
        data, fmt = image_bytes(name)
        images.append({"data": base64.b64encode(data).decode(), "format": fmt})
    return {**case, "images": images}


@pytest.fixture(scope="module")
def answers(direct: ServerProcess) -> dict[str, Any]:
    cases = [_wire(case) for case in detection_cases()] + [TEXT_ITEM]
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), direct.url, KEY],
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


@pytest.mark.parametrize("case", detection_cases(), ids=lambda case: case["name"])
def test_the_sdk_gets_transformers_own_objects(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers[case["name"]]
    assert got["raw"] == {"status": 200}
    assert "error" not in got, got["error"]
    for index, (objects, want) in enumerate(zip(got["objects"], recorded()[case["name"]], strict=True)):
        assert_objects_equal(objects, want, f"{case['name']}[{index}]")


def test_a_text_item_to_an_image_model_is_the_sdks_error(answers: dict[str, Any]) -> None:
    got = answers[TEXT_ITEM["name"]]
    assert got["raw"] == {"status": 400, "code": "INVALID_INPUT"}
    assert "images" in got["error"]
