"""The released ``sie-sdk`` 0.10.1 sends images to Sift unchanged: image and text
encode on the tiny CLIP and SigLIP models, through ``sift serve`` and through a
gateway with a worker, answer as the reference server answered the same SDK calls
(tests/fixtures/image_parity.json, recorded by experiments/record_image_parity.py)."""

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
from tests.compat.test_sie_sdk import COMPAT_PYTHON, _require_venv
from tests.fixtures.image_cases import BAD, GOOD, image_cases
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_images import TINY_CLIP, TINY_SIGLIP, build_tiny_clip, build_tiny_siglip

DRIVER = Path(__file__).with_name("image_driver.py")
FIXTURE = Path(__file__).parents[1] / "fixtures" / "image_parity.json"
MODELS = (TINY_CLIP, TINY_SIGLIP)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _require_venv()
    root = tmp_path_factory.mktemp("compat-images")
    catalog = root / "catalog"
    catalog.mkdir()
    folders = {TINY_CLIP: build_tiny_clip(root / "clip"), TINY_SIGLIP: build_tiny_siglip(root / "siglip")}
    for index, (name, folder) in enumerate(folders.items()):
        (catalog / f"image{index}.yaml").write_text(
            f"name: {name}\nadapter: clip\nbackend: torch\nsource:\n  path: {folder}\ntasks: [encode]\n"
        )
    return catalog


def _args(catalog: Path) -> list[str]:
    return ["--catalog", str(catalog), "--model", TINY_CLIP, "--preload", TINY_SIGLIP]


@pytest.fixture(scope="module")
def direct(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(_args(catalog), tmp_path_factory.mktemp("compat-images-serve") / "serve.log")
    yield proc
    proc.stop()


def drive(url: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), url],
        input=json.dumps(image_cases()),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def check_against_reference(result: dict[str, Any]) -> None:
    assert result.pop("sie_sdk_version") == "0.10.1"
    recorded: dict[str, Any] = json.loads(FIXTURE.read_text())["answers"]
    assert result.keys() == recorded.keys()
    refused = answered = 0
    for name, want in recorded.items():
        got = result[name]
        assert got["raw"] == want["raw"], name
        if "error" in want:
            # The SDK raised the same error, with the server's code (its messages are the server's own).
            assert got.get("error", "").split(":")[0] == want["error"].split(":")[0], (name, got)
            refused += 1
            continue
        assert "error" not in got, (name, got["error"])
        assert len(got["dense"]) == len(want["dense"])
        np.testing.assert_allclose(np.array(got["dense"]), np.array(want["dense"]), atol=1e-5, rtol=0)
        answered += 1
    assert (answered, refused) == (len(GOOD) * len(MODELS), len(BAD) * len(MODELS))


def test_sie_sdk_images_against_sift_serve_equal_the_reference(direct: ServerProcess) -> None:
    check_against_reference(drive(direct.url))


@pytest.fixture(scope="module")
def gateway(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("compat-images-cluster"), 0, [], _args(catalog))
    try:
        add_worker(cluster, "w-images", [*_args(catalog), "--no-calibrate", "--torch-threads", "1"])
        for model in MODELS:
            wait_workers(cluster, model, {"w-images"})
        yield cluster
    finally:
        cluster.stop()


def test_sie_sdk_images_through_the_gateway_equal_the_reference(gateway: LocalCluster) -> None:
    check_against_reference(drive(gateway.url))
