"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) on the reference
catalog's other decoder families (the tiny Mistral-family embedder with ``append_eos`` and
the tiny mxbai-rerank-v2 reranker of tests/fixtures/tiny_decoder.py), against ``sift serve``
and through the gateway (tests/compat/conftest.py): every parity case's answer equals the
reference's recorded one (tests/adapters/parity/decoder_families_reference.json) within 1e-5.
The tiny zerank-2 reranker too: its answers sie-server 0.10.1's (zerank_reference.json), its
refusals (an instruction, a row over the limit) errors as there.
The driver is the decoder family's (scripts/decoder_parity_driver.py)."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.cluster.local import LocalCluster
from tests.adapters.parity.decoder_cases import (
    FAMILIES_FIXTURE,
    MISTRAL_EMBED_CASES,
    MISTRAL_EMBEDDER,
    MXBAI_RERANKER,
    MXBAI_SCORE_CASES,
    ZERANK_FIXTURE,
    ZERANK_RERANKER,
    ZERANK_SCORE_CASES,
)
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "scripts" / "decoder_parity_driver.py"
TOL = 1e-5


@cache
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "tests" / "adapters" / "parity" / FAMILIES_FIXTURE).read_text())
    return data


def _drive(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, json.dumps(spec), KEY],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    answers: dict[str, Any] = json.loads(done.stdout)
    return answers


def _answers(url: str) -> dict[str, Any]:
    spec = {"embedder": MISTRAL_EMBEDDER, "reranker": MXBAI_RERANKER, "embed": MISTRAL_EMBED_CASES}
    spec["score"] = MXBAI_SCORE_CASES
    answers = _drive(url, spec)
    zerank = {"embedder": "", "reranker": ZERANK_RERANKER, "embed": [], "score": ZERANK_SCORE_CASES}
    answers["zerank"] = _drive(url, zerank)["score"]
    return answers


@pytest.fixture(scope="module", params=["direct", "gateway"])
def answers(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "direct":
        server: ServerProcess = request.getfixturevalue("direct")
        return _answers(server.url)
    cluster: LocalCluster = request.getfixturevalue("gateway")
    return _answers(cluster.url)


@pytest.mark.parametrize("case", MISTRAL_EMBED_CASES, ids=lambda case: case["name"])
def test_the_mistral_embedder_through_the_sdk_equals_the_reference(
    answers: dict[str, Any], case: dict[str, Any]
) -> None:
    got = answers["embed"][case["name"]]
    assert not isinstance(got, dict), got
    want = recorded()["embed_mistral"][case["name"]]
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=TOL, rtol=0)


@pytest.mark.parametrize("case", MXBAI_SCORE_CASES, ids=lambda case: case["name"])
def test_the_mxbai_reranker_through_the_sdk_equals_the_library(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got = answers["score"][case["name"]]
    assert not isinstance(got, dict), got
    np.testing.assert_allclose(got, recorded()["score_mxbai"][case["name"]], atol=TOL, rtol=0)


@cache
def zerank_recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "tests" / "adapters" / "parity" / ZERANK_FIXTURE).read_text())["score"]
    return data


@pytest.mark.parametrize("case", ZERANK_SCORE_CASES, ids=lambda case: case["name"])
def test_zerank_through_the_sdk_equals_the_reference_server(answers: dict[str, Any], case: dict[str, Any]) -> None:
    got, want = answers["zerank"][case["name"]], zerank_recorded()[case["name"]]
    if isinstance(want, dict):
        # The reference refused it (400): so does Sift, as the same kind of SDK error.
        assert isinstance(got, dict), got
        assert got["error"].split(":")[0] == want["error"].split(":")[0], (got, want)
        return
    assert not isinstance(got, dict), got
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
