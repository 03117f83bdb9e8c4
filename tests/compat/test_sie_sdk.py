"""Black-box compatibility: the released ``sie-sdk`` (0.10.1, Python 3.12) and the
``openai`` client, unchanged, against ``sift serve`` and against a gateway with a
worker (tests/compat/conftest.py), with an API key. They run in their own virtual
environment, in a subprocess: ``tests/compat/sie_driver.py``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.cluster.local import LocalCluster
from tests.compat.conftest import COMPAT_PYTHON, KEY, NER, RERANK
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

DRIVER = Path(__file__).with_name("sie_driver.py")
SPEC = {"embedder": TINY_EMBEDDER, "reranker": RERANK, "extractor": NER, "openai": True}


def drive(url: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url, KEY, json.dumps(SPEC)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def ok(result: dict[str, Any], call: str) -> Any:
    entry = result[call]
    assert "ok" in entry, f"{call}: {entry.get('error')}\n{entry.get('trace')}"
    return entry["ok"]


def check_answers(result: dict[str, Any]) -> None:
    assert result["sie_sdk_version"] == "0.10.1"
    one = ok(result, "encode_one")
    assert len(one["dense"]) == 32
    many = ok(result, "encode_many")
    assert [len(r["dense"]) for r in many] == [32, 32]
    score = ok(result, "score")
    assert sorted(s["item_id"] for s in score["scores"]) == ["x", "y"]
    extract = ok(result, "extract")
    assert len(extract) == 1 and isinstance(extract[0]["entities"], list)
    # The SDK's own error for an unknown model (it reads the envelope's message).
    assert result["missing_model"]["error"].startswith("RequestError: ")
    assert "not found" in result["missing_model"]["error"]
    vectors = ok(result, "openai_embeddings")
    assert [len(v) for v in vectors] == [32, 32]


@pytest.fixture(scope="module")
def direct_answers(direct: ServerProcess) -> dict[str, Any]:
    """What the clients got from ``sift serve`` (one driver run; both tests read it)."""
    return drive(direct.url)


def test_sie_sdk_and_openai_against_sift_serve(direct_answers: dict[str, Any]) -> None:
    check_answers(direct_answers)


def test_sie_sdk_and_openai_through_the_gateway_match_sift_serve(
    direct_answers: dict[str, Any], gateway: LocalCluster
) -> None:
    through = drive(gateway.url)
    check_answers(through)
    reference = direct_answers
    for call in ("encode_one", "encode_many", "openai_embeddings"):
        got, want = ok(through, call), ok(reference, call)
        if isinstance(got, dict):
            got, want = [got], [want]
        if call != "openai_embeddings":
            got, want = [g["dense"] for g in got], [w["dense"] for w in want]
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-6)
    score_got = {s["item_id"]: s["score"] for s in ok(through, "score")["scores"]}
    score_want = {s["item_id"]: s["score"] for s in ok(reference, "score")["scores"]}
    assert score_got.keys() == score_want.keys()
    for item_id, value in score_want.items():
        assert score_got[item_id] == pytest.approx(value, rel=1e-5, abs=1e-6)
    assert ok(through, "extract") == ok(reference, "extract")
