"""An artifact cache that cannot take an export (the disk full, the folder read-only
and no temporary folder either) never fails a load: the model serves on PyTorch
fp32, the reference, with a warning naming the cause. The full disk is injected
(ENOSPC from the export's write) and, where this process may mount one, real: a
tmpfs filled to the last byte."""

from __future__ import annotations

import contextlib
import errno
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters.backends import artifacts
from sift_server.adapters.backends import export as exporting
from sift_server.adapters.base import EncodeTask, LoadContext, Part
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from tests.fixtures.tiny_embedder import build_tiny_embedder

TEXTS = ["a", "The committee approved the budget.", "zebra crossing near the old railway station"]


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_embedder(tmp_path_factory.mktemp("tiny-embedder"), seed=3)


@pytest.fixture(scope="module")
def reference(embedder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    cache = tmp_path_factory.mktemp("reference-cache")
    return embed(SentenceEmbedderAdapter.load(context(embedder_dir, cache, "torch", "fp32")))


def context(path: Path, cache: Path, backend: str, precision: str | None = None) -> LoadContext:
    return LoadContext(
        path=path,
        options={"device": "cpu"},
        max_sequence_length=None,
        torch_threads=1,
        backend=backend,
        precision=precision,
        cache_dir=cache,
    )


def embed(adapter: SentenceEmbedderAdapter) -> np.ndarray:
    prepared = adapter.prepare(EncodeTask(TEXTS))
    return np.stack(adapter.forward([Part(prepared, 0, len(TEXTS))])[0])


def no_space(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def assert_on_pytorch(
    adapter: SentenceEmbedderAdapter, reference: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    assert adapter.info.runtime["backend"] == "torch"
    assert adapter.info.runtime["selected_by"].startswith("fallback")
    np.testing.assert_allclose(embed(adapter), reference, atol=1e-6)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "PyTorch" in r.getMessage()]
    assert warned, caplog.text


@pytest.mark.parametrize(("backend", "precision"), [("onnx", "fp32"), ("openvino", "fp32"), ("onnx", "int8")])
def test_a_full_cache_serves_a_named_backend_on_pytorch_with_a_warning(
    embedder_dir: Path,
    reference: np.ndarray,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    backend: str,
    precision: str,
) -> None:
    monkeypatch.setattr(exporting, "export_onnx", no_space)
    with caplog.at_level(logging.WARNING):
        adapter = SentenceEmbedderAdapter.load(context(embedder_dir, tmp_path, backend, precision))
    assert_on_pytorch(adapter, reference, caplog)
    assert "No space left on device" in caplog.text
    assert not list(tmp_path.rglob(".*-*")), "no half-written export left behind"


def test_a_full_cache_lets_auto_serve_on_pytorch(
    embedder_dir: Path,
    reference: np.ndarray,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(exporting, "export_onnx", no_space)
    with caplog.at_level(logging.WARNING):
        adapter = SentenceEmbedderAdapter.load(context(embedder_dir, tmp_path, "auto"))
    assert adapter.info.runtime["backend"] == "torch"
    np.testing.assert_allclose(embed(adapter), reference, atol=1e-6)
    assert "No space left on device" in caplog.text


def test_a_read_only_cache_without_any_writable_folder_serves_on_pytorch(
    embedder_dir: Path,
    reference: np.ndarray,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def read_only(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "Read-only file system")

    # The cache refuses writes (as for root, whom chmod does not stop) and so does the
    # temporary folder it would fall back to (a read-only root filesystem).
    monkeypatch.setattr(artifacts, "probe_write", read_only)
    monkeypatch.setattr(artifacts, "_fallback_dir", None)
    monkeypatch.setattr(artifacts.tempfile, "mkdtemp", read_only)
    with caplog.at_level(logging.WARNING):
        adapter = SentenceEmbedderAdapter.load(context(embedder_dir, tmp_path, "onnx", "fp32"))
    assert_on_pytorch(adapter, reference, caplog)


@contextlib.contextmanager
def full_tmpfs(folder: Path) -> Iterator[Path]:
    """A tiny tmpfs at ``folder``, filled to the last byte (skips where mounting is not allowed)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        with contextlib.suppress(OSError), (folder / "filler").open("wb") as filler:
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_really_full_filesystem_serves_on_pytorch(
    embedder_dir: Path, reference: np.ndarray, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with full_tmpfs(tmp_path / "full") as cache, caplog.at_level(logging.WARNING):
        adapter = SentenceEmbedderAdapter.load(context(embedder_dir, cache, "onnx", "fp32"))
        assert_on_pytorch(adapter, reference, caplog)
