"""Black-box compatibility: the released SIE integrations that need no server of their own
(sie-qdrant with qdrant-client's ``:memory:`` mode, sie-chroma with chromadb's in-process
client, sie-lancedb with a LanceDB folder), unchanged, against ``sift serve``
(tests/compat/conftest.py), as a new user runs them: ``SIE_BASE_URL`` and ``SIE_API_KEY``
set, embed through the integration, store, query. They run in the compatibility venv, in
a subprocess: ``tests/compat/integrations_driver.py``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.compat.conftest import COMPAT_PYTHON, KEY, RERANK
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

DRIVER = Path(__file__).with_name("integrations_driver.py")
SPEC = {"embedder": TINY_EMBEDDER, "reranker": RERANK}
INTEGRATIONS = ("sie-qdrant", "sie-chroma", "sie-lancedb")
HEADERS = {"Authorization": f"Bearer {KEY}", "Accept": "application/json"}


@pytest.fixture(scope="module")
def answers(direct: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("lancedb")
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), direct.url, json.dumps(SPEC), str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": "", "SIE_BASE_URL": direct.url, "SIE_API_KEY": KEY},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def sift_vectors(url: str, texts: list[str]) -> np.ndarray:
    body = {"items": [{"text": t} for t in texts]}
    answer = httpx.post(f"{url}/v1/encode/{TINY_EMBEDDER}", json=body, headers=HEADERS, timeout=60)
    answer.raise_for_status()
    return np.array([r["dense"]["values"] for r in answer.json()["items"]], dtype=np.float64)


@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_an_integration_embeds_stores_and_finds_through_sift(
    integration: str, answers: dict[str, Any], direct: ServerProcess
) -> None:
    entry = answers[integration]
    assert "ok" in entry, f"{integration}: {entry.get('error')}\n{entry.get('trace')}"
    got = entry["ok"]
    documents: list[str] = answers["documents"]
    # The stored vectors are Sift's (float32 as the store keeps them).
    want = sift_vectors(direct.url, documents)
    np.testing.assert_allclose(np.array(got["vectors"]), want, rtol=1e-5, atol=1e-6)
    # The query is the second document: it finds itself first, then the rest by cosine.
    unit = want / np.linalg.norm(want, axis=1, keepdims=True)
    query = unit[documents.index(answers["query"])]
    assert got["hits"] == [int(i) for i in np.argsort(-(unit @ query), kind="stable")]


def test_the_lancedb_reranker_scores_as_sift(answers: dict[str, Any], direct: ServerProcess) -> None:
    got = answers["sie-lancedb"]["ok"]["reranked"]
    documents: list[str] = answers["documents"]
    body = {"query": {"text": answers["query"]}, "items": [{"id": str(i), "text": d} for i, d in enumerate(documents)]}
    answer = httpx.post(f"{direct.url}/v1/score/{RERANK}", json=body, headers=HEADERS, timeout=60)
    answer.raise_for_status()
    want = {int(s["item_id"]): s["score"] for s in answer.json()["scores"]}
    assert sorted(index for index, _ in got) == sorted(want)
    for index, value in got:
        assert value == pytest.approx(want[index], rel=1e-5, abs=1e-6)
