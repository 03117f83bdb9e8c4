"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) on the two tiny models of
the ``colpali-engine`` adapter, ColQwen2.5 and colSmol (``ColIdefics3``), against ``sift serve``
and through the gateway (tests/compat/conftest.py): every parity case's multivectors and MaxSim
scores equal colpali-engine's recorded ones (tests/adapters/parity/colvision_reference.json and
colsmol_reference.json) within 1e-5."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from sift_server.cluster.local import LocalCluster
from tests.adapters.parity import colsmol_cases, colvision_cases
from tests.compat.conftest import COMPAT_PYTHON, KEY
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_colsmol import TINY_COLSMOL, colsmol_images
from tests.fixtures.tiny_colvision import TINY_COLQWEN2_5, colvision_images

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "scripts" / "colpali_parity_driver.py"


def _unpack(packed: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(packed["f32"]), dtype="<f4").reshape(packed["shape"])


# Per family: its parity cases, its tiny model and the pages its cases name.
FAMILIES: dict[str, tuple[ModuleType, str, Callable[[], list[bytes]]]] = {
    "colqwen2.5": (colvision_cases, TINY_COLQWEN2_5, colvision_images),
    "colsmol": (colsmol_cases, TINY_COLSMOL, colsmol_images),
}


@cache
def recorded(family: str) -> dict[str, Any]:
    cases, tiny, _ = FAMILIES[family]
    data: dict[str, Any] = json.loads((ROOT / "tests" / "adapters" / "parity" / cases.FIXTURE).read_text())["models"]
    model = data[tiny]
    model["embed"] = {name: [_unpack(v) for v in vectors] for name, vectors in model["embed"].items()}
    return data


def _answers(url: str, family: str) -> dict[str, Any]:
    cases, _, images = FAMILIES[family]
    spec = {"models": list(cases.MODELS), "embed": cases.EMBED_CASES, "score": cases.SCORE_CASES}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, json.dumps(spec), KEY],
        input=json.dumps([base64.b64encode(data).decode() for data in images()]),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    answers: dict[str, Any] = json.loads(done.stdout)
    return answers


def _cases(kind: str) -> list[Any]:
    """(family, model, case) of every family's ``kind`` cases."""
    return [
        pytest.param(family, model, case, id=f"{family}-{case['name']}")
        for family, (cases, _, _) in FAMILIES.items()
        for model in cases.MODELS
        for case in getattr(cases, kind)
    ]


@pytest.fixture(scope="module", params=["direct", "gateway"])
def answers(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """Every family's answers, from one server kind."""
    if request.param == "direct":
        server: ServerProcess = request.getfixturevalue("direct")
        url = server.url
    else:
        cluster: LocalCluster = request.getfixturevalue("gateway")
        url = cluster.url
    return {family: _answers(url, family) for family in FAMILIES}


@pytest.mark.parametrize(("family", "model", "case"), _cases("EMBED_CASES"))
def test_encode_through_the_sdk_equals_colpali_engine(
    answers: dict[str, dict[str, Any]], family: str, model: str, case: dict[str, Any]
) -> None:
    got = answers[family][model]["embed"][case["name"]]
    assert not isinstance(got, dict), got
    expected = FAMILIES[family][0].expected_items(recorded(family)[model]["embed"], case)
    assert len(got) == len(expected)
    for vectors, want in zip(got, expected, strict=True):
        assert np.asarray(vectors).shape == want.shape
        np.testing.assert_allclose(vectors, want, atol=FAMILIES[family][0].TOL, rtol=0)


@pytest.mark.parametrize(("family", "model", "case"), _cases("SCORE_CASES"))
def test_score_through_the_sdk_equals_colpali(
    answers: dict[str, dict[str, Any]], family: str, model: str, case: dict[str, Any]
) -> None:
    got = answers[family][model]["score"][case["name"]]
    assert not isinstance(got, dict), got
    want = recorded(family)[model]["score"][case["name"]]
    np.testing.assert_allclose(got, want, atol=FAMILIES[family][0].TOL, rtol=0)
