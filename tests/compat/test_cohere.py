"""Black-box compatibility: the released ``cohere`` client's ``rerank`` (the v1 client:
the reference serves ``POST /v1/rerank``), unchanged, against ``sift serve`` and against a
gateway with a worker (tests/compat/conftest.py). It runs in the compatibility venv, in a
subprocess: ``tests/compat/cohere_driver.py``. Its scores are ``/v1/score``'s for the
same pairs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from sift_server.cluster.local import LocalCluster
from tests.compat.conftest import COMPAT_PYTHON, KEY, RERANK
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

DRIVER = Path(__file__).with_name("cohere_driver.py")
SPEC = {"reranker": RERANK, "embedder": TINY_EMBEDDER}


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


def native_scores(url: str, query: str, documents: list[str]) -> list[float]:
    """``/v1/score``'s score for each document, in request order."""
    body = {"query": {"text": query}, "items": [{"id": str(i), "text": d} for i, d in enumerate(documents)]}
    answer = httpx.post(
        f"{url}/v1/score/{RERANK}",
        json=body,
        headers={"Authorization": f"Bearer {KEY}", "Accept": "application/json"},
        timeout=60,
    )
    answer.raise_for_status()
    by_id = {entry["item_id"]: entry["score"] for entry in answer.json()["scores"]}
    return [by_id[str(i)] for i in range(len(documents))]


def check(url: str, result: dict[str, Any]) -> None:
    documents: list[str] = result["documents"]
    want = native_scores(url, result["query"], documents)
    every = ok(result, "strings")["results"]
    assert sorted(r["index"] for r in every) == list(range(len(documents)))
    assert [r["relevance_score"] for r in every] == sorted(want, reverse=True)
    for entry in every:
        assert entry["relevance_score"] == pytest.approx(want[entry["index"]], rel=1e-6, abs=1e-7)
        assert entry.get("document") is None
    top = ok(result, "objects_top_n")["results"]
    assert [r["index"] for r in top] == [r["index"] for r in every[:2]]
    assert [r["document"]["text"] for r in top] == [documents[r["index"]] for r in top]
    refused = result["no_score_task"]["error"]
    assert refused.startswith("BadRequestError: ") and "does not support reranking" in refused


@pytest.fixture(scope="module")
def direct_answers(direct: ServerProcess) -> dict[str, Any]:
    """What the client got from ``sift serve`` (one driver run; both tests read it)."""
    return drive(direct.url)


def test_cohere_rerank_against_sift_serve(direct: ServerProcess, direct_answers: dict[str, Any]) -> None:
    check(direct.url, direct_answers)


def test_cohere_rerank_through_the_gateway(direct_answers: dict[str, Any], gateway: LocalCluster) -> None:
    through = drive(gateway.url)
    check(gateway.url, through)
    direct_scores = {r["index"]: r["relevance_score"] for r in ok(direct_answers, "strings")["results"]}
    for entry in ok(through, "strings")["results"]:
        assert entry["relevance_score"] == pytest.approx(direct_scores[entry["index"]], rel=1e-5, abs=1e-6)
