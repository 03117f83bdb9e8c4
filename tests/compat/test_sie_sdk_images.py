"""The released ``sie-sdk`` 0.10.1 sends images to Sift unchanged: image and text
encode on the tiny CLIP and SigLIP models, through ``sift serve`` and through a
gateway with a worker (tests/compat/conftest.py, with an API key), answer as the
reference server answered the same SDK calls (tests/fixtures/image_parity.json,
recorded by scripts/record_image_parity.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from sift_server.cluster.local import LocalCluster
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.image_cases import BAD, GOOD, image_cases
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_images import TINY_CLIP, TINY_SIGLIP

DRIVER = Path(__file__).with_name("image_driver.py")
FIXTURE = Path(__file__).parents[1] / "fixtures" / "image_parity.json"
MODELS = (TINY_CLIP, TINY_SIGLIP)


def drive(url: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, KEY],
        input=json.dumps(image_cases()),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def check_against_reference(result: dict[str, Any]) -> None:
    assert result.pop("sie_sdk_version") == "0.10.1"
    recorded: dict[str, Any] = json.loads(FIXTURE.read_text())["answers"]
    assert result.keys() == recorded.keys()
    refused = answered = 0
    for name, want in recorded.items():
        got = result[name]
        assert got["raw"] == want["raw"], name
        if "error" in want:
            # The SDK raised the same error, with the server's code (its messages are the server's own).
            assert got.get("error", "").split(":")[0] == want["error"].split(":")[0], (name, got)
            refused += 1
            continue
        assert "error" not in got, (name, got["error"])
        assert len(got["dense"]) == len(want["dense"])
        np.testing.assert_allclose(np.array(got["dense"]), np.array(want["dense"]), atol=1e-5, rtol=0)
        answered += 1
    assert (answered, refused) == (len(GOOD) * len(MODELS), len(BAD) * len(MODELS))


def test_sie_sdk_images_against_sift_serve_equal_the_reference(direct: ServerProcess) -> None:
    check_against_reference(drive(direct.url))


def test_sie_sdk_images_through_the_gateway_equal_the_reference(gateway: LocalCluster) -> None:
    check_against_reference(drive(gateway.url))
