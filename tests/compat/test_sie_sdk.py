"""Black-box compatibility: the released ``sie-sdk`` (0.10.1, Python 3.12) and the
``openai`` client, unchanged, against ``sift serve`` and against a gateway with a
worker. They run in their own virtual environment (``.venv/sie-compat``, made by
``scripts/bootstrap.sh``), in a subprocess: ``tests/compat/sie_driver.py``."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.cluster.local import LocalCluster
from tests.cluster.conftest import add_worker, start_cluster, wait_workers
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry
from tests.fixtures.tiny_models import build_tiny_cross_encoder, build_tiny_gliner

ROOT = Path(__file__).resolve().parents[2]
COMPAT_VENV = Path(os.environ.get("SIFT_SIE_COMPAT_VENV", ROOT / ".venv" / "sie-compat"))
COMPAT_PYTHON = COMPAT_VENV / "bin" / "python"
# The interpreter bootstrap.sh builds the venv with (sie-sdk 0.10.1 needs Python 3.12).
PYTHON312 = Path(os.environ.get("SIFT_PYTHON312", Path.home() / ".pyenv/versions/3.12.1/bin/python3.12"))
DRIVER = Path(__file__).with_name("sie_driver.py")
KEY = "s3cret"
RERANK, NER = "tiny/reranker", "tiny/gliner"
SPEC = {"embedder": TINY_EMBEDDER, "reranker": RERANK, "extractor": NER, "openai": True}


def _require_venv() -> None:
    if COMPAT_PYTHON.exists():
        return
    if PYTHON312.exists():
        pytest.fail(f"{COMPAT_VENV} is missing although {PYTHON312} exists: run scripts/bootstrap.sh")
    pytest.skip(f"no Python 3.12 ({PYTHON312}) for the released sie-sdk")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _require_venv()
    root = tmp_path_factory.mktemp("compat")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "embedder"))
    reranker = build_tiny_cross_encoder(root / "reranker")
    gliner = build_tiny_gliner(root / "gliner")
    lines = {
        "reranker.yaml": f"name: {RERANK}\nadapter: cross-encoder\nsource:\n  path: {reranker}\ntasks: [score]\n",
        "gliner.yaml": f"name: {NER}\nadapter: gliner\nsource:\n  path: {gliner}\ntasks: [extract]\n"
        "options:\n  threshold: 0.0\n",
    }
    for name, text in lines.items():
        (catalog / name).write_text(text)
    return catalog


def _model_args(catalog: Path) -> list[str]:
    return ["--catalog", str(catalog), "--model", TINY_EMBEDDER, "--preload", RERANK, "--preload", NER]


@pytest.fixture(scope="module")
def direct(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("compat-serve")
    proc = start_server([*_model_args(catalog), "--api-key", KEY], root / "serve.log")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def gateway(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("compat-cluster")
    cluster = start_cluster(root, 0, [], [*_model_args(catalog), "--api-key", KEY])
    try:
        add_worker(cluster, "w-compat", [*_model_args(catalog), "--no-calibrate", "--torch-threads", "1"])
        for model in (TINY_EMBEDDER, RERANK, NER):
            wait_workers(cluster, model, {"w-compat"}, headers={"Authorization": f"Bearer {KEY}"})
        yield cluster
    finally:
        cluster.stop()


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


def test_sie_sdk_and_openai_against_sift_serve(direct: ServerProcess) -> None:
    check_answers(drive(direct.url))


def test_sie_sdk_and_openai_through_the_gateway_match_sift_serve(direct: ServerProcess, gateway: LocalCluster) -> None:
    through = drive(gateway.url)
    check_answers(through)
    reference = drive(direct.url)
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
