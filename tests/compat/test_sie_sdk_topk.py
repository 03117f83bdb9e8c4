"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) on the tiny TopK-Embed
folder (adapter ``topk-embed``), against ``sift serve`` and through the gateway
(tests/compat/conftest.py): every parity case's multivectors (queries, text documents, pages,
``normalize: false``) and MaxSim scores equal the reference server's recorded ones
(tests/adapters/parity/topk_reference.json) within 1e-5."""

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
from tests.adapters.parity.topk_cases import EMBED_CASES, FIXTURE, MODEL, SCORE_CASES, TOL
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_topk import topk_images

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "scripts" / "colpali_parity_driver.py"


def _unpack(packed: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(packed["f32"]), dtype="<f4").reshape(packed["shape"])


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "tests" / "adapters" / "parity" / FIXTURE).read_text())
    data["embed"] = {name: [_unpack(v) for v in vectors] for name, vectors in data["embed"].items()}
    return data


@pytest.fixture(scope="module", params=["direct", "gateway"])
def answers(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "direct":
        server: ServerProcess = request.getfixturevalue("direct")
        url = server.url
    else:
        cluster: LocalCluster = request.getfixturevalue("gateway")
        url = cluster.url
    spec = {"models": [MODEL], "embed": EMBED_CASES, "score": SCORE_CASES}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, json.dumps(spec), KEY],
        input=json.dumps([base64.b64encode(data).decode() for data in topk_images()]),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    out: dict[str, Any] = json.loads(done.stdout)[MODEL]
    return out


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_through_the_sdk_equals_the_reference(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers["embed"][case["name"]]
    assert not isinstance(got, dict), got
    want = recorded()["embed"][case["name"]]
    assert len(got) == len(want)
    for vectors, expected in zip(got, want, strict=True):
        assert np.asarray(vectors).shape == expected.shape
        np.testing.assert_allclose(vectors, expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_through_the_sdk_equals_the_reference(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers["score"][case["name"]]
    assert not isinstance(got, dict), got
    np.testing.assert_allclose(got, recorded()["score"][case["name"]], atol=TOL, rtol=0)
