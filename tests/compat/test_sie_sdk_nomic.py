"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) on the tiny folder in
the published Nomic layout, served by ``sentence-embedder`` on transformers' own
``NomicBertModel`` (normalized, and ``normalize: false`` as a second entry of the same
folder), against ``sift serve`` and through the gateway (tests/compat/conftest.py): every
parity case's vectors equal the reference's recorded ones (sentence-transformers over the
publisher's code: tests/adapters/parity/nomic_reference.json) within 1e-5."""

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
from tests.adapters.parity.nomic_cases import CASES, FIXTURE, TOL
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_nomic import TINY_NOMIC, TINY_NOMIC_RAW

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "scripts" / "decoder_parity_driver.py"


@cache
def recorded() -> dict[str, np.ndarray]:
    data = json.loads((ROOT / "tests" / "adapters" / "parity" / FIXTURE).read_text())
    return {
        name: np.frombuffer(base64.b64decode(packed["f32"]), dtype="<f4").reshape(packed["rows"], -1)
        for name, packed in data["vectors"].items()
    }


def _answers(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model, normalize in ((TINY_NOMIC, True), (TINY_NOMIC_RAW, False)):
        cases = [case for case in CASES if case["normalize"] == normalize]
        spec = {"embedder": model, "reranker": model, "embed": cases, "score": []}
        done = subprocess.run(
            [str(COMPAT_PYTHON), str(DRIVER), url, json.dumps(spec), KEY],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        out.update(json.loads(done.stdout)["embed"])
    return out


@pytest.fixture(scope="module", params=["direct", "gateway"])
def answers(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "direct":
        server: ServerProcess = request.getfixturevalue("direct")
        return _answers(server.url)
    cluster: LocalCluster = request.getfixturevalue("gateway")
    return _answers(cluster.url)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_encode_through_the_sdk_equals_the_reference(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers[case["name"]]
    assert not isinstance(got, dict), got
    np.testing.assert_allclose(np.asarray(got), recorded()[case["name"]], atol=TOL, rtol=0)
