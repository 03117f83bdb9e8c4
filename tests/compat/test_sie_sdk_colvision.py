"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) on the tiny ColQwen2.5
in colpali-engine's layout (adapter ``colpali-engine``), against ``sift serve`` and through the
gateway (tests/compat/conftest.py): every parity case's multivectors and MaxSim scores equal
colpali-engine's recorded ones (tests/adapters/parity/colvision_reference.json) within 1e-5."""

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
from tests.adapters.parity.colvision_cases import EMBED_CASES, FIXTURE, MODELS, SCORE_CASES, TOL, expected_items
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_colvision import TINY_COLQWEN2_5, colvision_images

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "scripts" / "colpali_parity_driver.py"


def _unpack(packed: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(packed["f32"]), dtype="<f4").reshape(packed["shape"])


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "tests" / "adapters" / "parity" / FIXTURE).read_text())["models"]
    model = data[TINY_COLQWEN2_5]
    model["embed"] = {name: [_unpack(v) for v in vectors] for name, vectors in model["embed"].items()}
    return data


def _answers(url: str) -> dict[str, Any]:
    spec = {"models": list(MODELS), "embed": EMBED_CASES, "score": SCORE_CASES}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, json.dumps(spec), KEY],
        input=json.dumps([base64.b64encode(data).decode() for data in colvision_images()]),
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
def test_encode_through_the_sdk_equals_colpali_engine(
    answers: dict[str, Any], model: str, case: dict[str, Any]
) -> None:
    got = answers[model]["embed"][case["name"]]
    assert not isinstance(got, dict), got
    expected = expected_items(recorded()[model]["embed"], case)
    assert len(got) == len(expected)
    for vectors, want in zip(got, expected, strict=True):
        assert np.asarray(vectors).shape == want.shape
        np.testing.assert_allclose(vectors, want, atol=TOL, rtol=0)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_through_the_sdk_equals_colpali(answers: dict[str, Any], model: str, case: dict[str, Any]) -> None:
    got = answers[model]["score"][case["name"]]
    assert not isinstance(got, dict), got
    np.testing.assert_allclose(got, recorded()[model]["score"][case["name"]], atol=TOL, rtol=0)
