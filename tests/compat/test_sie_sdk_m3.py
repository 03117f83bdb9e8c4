"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) on the tiny BGE-M3,
against ``sift serve`` and through the gateway (tests/compat/conftest.py): every parity
case's dense, sparse and multivector answer and every ``score_mode``'s scores equal
FlagEmbedding's recorded ones (tests/adapters/parity) within 1e-5, sparse token ids exactly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.cluster.local import LocalCluster
from tests.adapters.parity.m3_cases import EMBED_CASES, MODEL, OUTPUTS, SCORE_CASES
from tests.adapters.parity.m3_compare import TOL, assert_item_equals, recorded
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess

DRIVER = Path(__file__).resolve().parents[2] / "scripts" / "m3_parity_driver.py"


def _answers(url: str) -> dict[str, Any]:
    spec = {"model": MODEL, "outputs": OUTPUTS, "embed": EMBED_CASES, "score": SCORE_CASES}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, json.dumps(spec), KEY],
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


@pytest.mark.parametrize("case", EMBED_CASES, ids=lambda case: case["name"])
def test_encode_through_the_sdk_equals_the_reference(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers["embed"][case["name"]]
    assert not isinstance(got, dict), got
    expected = recorded()["embed"][case["name"]]
    assert len(got) == len(case["texts"])
    for index, item in enumerate(got):
        sparse = item["sparse"]
        assert_item_equals({**item, "sparse": (sparse["indices"], sparse["values"])}, expected, index)


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda case: case["name"])
def test_score_through_the_sdk_equals_the_reference(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers["score"][case["name"]]
    assert not isinstance(got, dict), got
    np.testing.assert_allclose(got, recorded()["score"][case["name"]], atol=TOL, rtol=0)
