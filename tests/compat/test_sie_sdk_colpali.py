"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) on the tiny ColPali
and ColQwen2, against ``sift serve`` and through the gateway (tests/compat/conftest.py):
every parity case's multivectors (page images and text queries) and MaxSim scores equal
the recorded ones (tests/adapters/parity/colpali_reference.json) within 1e-5."""

from __future__ import annotations

import base64
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.cluster.local import LocalCluster
from tests.adapters.parity.colpali_cases import EMBED_CASES, FIXTURE, MODELS, SCORE_CASES, TOL
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_colpali import image_bytes

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "scripts" / "colpali_parity_driver.py"


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "tests" / "adapters" / "parity" / FIXTURE).read_text())["models"]
    return data


def _answers(url: str) -> dict[str, Any]:
    spec = {"models": list(MODELS), "embed": EMBED_CASES, "score": SCORE_CASES}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, json.dumps(spec), KEY],
        input=json.dumps([base64.b64encode(data).decode() for data in image_bytes()]),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    answers: dict[str, Any] = json.loads(done.stdout)
    return answers


@pytest.fixture(scope="module", params=["direct", "gateway"])
def answers(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "direct":
        server: ServerProcess = request.getfixturevalue("direct")
        return _answers(server.url)
    cluster: LocalCluster = request.getfixturevalue("gateway")
    return _answers(cluster.url)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_through_the_sdk_equals_transformers(answers: dict[str, Any], model: str, case: dict[str, Any]) -> None:
    got = answers[model]["embed"][case["name"]]
    assert not isinstance(got, dict), got
    expected = recorded()[model]["embed"][case["name"]]
    assert len(got) == len(expected)
    for vectors, want in zip(got, expected, strict=True):
        assert np.asarray(vectors).shape == np.asarray(want).shape
        np.testing.assert_allclose(vectors, want, atol=TOL, rtol=0)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_through_the_sdk_equals_transformers(answers: dict[str, Any], model: str, case: dict[str, Any]) -> None:
    got = answers[model]["score"][case["name"]]
    assert not isinstance(got, dict), got
    np.testing.assert_allclose(got, recorded()[model]["score"][case["name"]], atol=TOL, rtol=0)
