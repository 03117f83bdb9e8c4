from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="session")
def tiny_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    model_dir = build_tiny_embedder(root / "model")
    catalog = root / "catalog"
    write_catalog_entry(catalog, model_dir)
    return catalog


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_catalog: Path) -> Iterator[ServerProcess]:
    """The real default model, plus the tiny model in the catalog (not preloaded)."""
    root = tmp_path_factory.mktemp("server")
    proc = start_server(
        # A long queue timeout: on a loaded 2-core machine the default 30 s can expire behind the
        # concurrency tests' large blocking requests (queue timeouts are tested on servers of their own).
        ["--catalog", str(tiny_catalog), "--trace-file", str(root / "trace.jsonl"), "--queue-timeout-s", "120"],
        root / "server.log",
    )
    proc.trace_path = root / "trace.jsonl"  # type: ignore[attr-defined]
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory: pytest.TempPathFactory, tiny_catalog: Path) -> Iterator[ServerProcess]:
    """The tiny model as default, with an API key and a small queue."""
    root = tmp_path_factory.mktemp("tiny-server")
    proc = start_server(
        [
            "--catalog",
            str(tiny_catalog),
            "--model",
            TINY_EMBEDDER,
            "--api-key",
            "s3cret",
            "--max-queue-items",
            "4",
            "--max-request-items",
            "4",
        ],
        root / "server.log",
    )
    yield proc
    proc.stop()
