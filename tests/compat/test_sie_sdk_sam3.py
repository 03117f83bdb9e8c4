"""The released ``sie-sdk`` 0.10.1 sends images to Sift's SAM 3 unchanged: the tiny
model through ``sift serve`` (tests/compat/conftest.py, with an API key) answers the
objects sie-server 0.10.1's own ``sam3`` adapter answered
(tests/fixtures/sam3_parity.json), and a request it cannot take is the SDK's error,
a 400 on the wire."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_sam3 import RECORDED, assert_objects_equal
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.sam3_cases import image_bytes, sam3_cases
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_sam3 import TINY_SAM3

DRIVER = Path(__file__).with_name("detection_driver.py")
REFUSED = [
    {"name": "sam3:text-item", "labels": ["cat"], "options": {}, "texts": ["a cat"]},
    {"name": "sam3:no-labels", "labels": [], "options": {}, "images": ["wide_png"]},
    {"name": "sam3:long-label", "labels": ["cat " * 40], "options": {}, "images": ["wide_png"]},
]


def _wire(case: dict[str, Any]) -> dict[str, Any]:
    wired: dict[str, Any] = {**case, "model": TINY_SAM3}
    if "images" in case:
        images = []
        for name in case["images"]:
            data, fmt = image_bytes(name)
            images.append({"data": base64.b64encode(data).decode(), "format": fmt})
        wired["images"] = images
    return wired


@pytest.fixture(scope="module")
def answers(direct: ServerProcess) -> dict[str, Any]:
    cases = [_wire({**case, "name": f"sam3:{case['name']}"}) for case in sam3_cases()]
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), direct.url, KEY],
        input=json.dumps(cases + [_wire(case) for case in REFUSED]),
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


@pytest.mark.parametrize("case", sam3_cases(), ids=lambda case: case["name"])
def test_the_sdk_gets_the_reference_servers_objects(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers[f"sam3:{case['name']}"]
    assert got["raw"] == {"status": 200}
    assert "error" not in got, got["error"]
    want = RECORDED["cases"][case["name"]]["objects"]
    for index, (objects, objects_want) in enumerate(zip(got["objects"], want, strict=True)):
        assert_objects_equal(objects, objects_want, f"{case['name']}[{index}]")


@pytest.mark.parametrize("case", REFUSED, ids=lambda case: case["name"])
def test_what_it_cannot_take_is_the_sdks_error(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers[case["name"]]
    assert got["raw"] == {"status": 400, "code": "INVALID_INPUT"}
    assert "error" in got
