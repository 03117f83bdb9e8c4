"""The servers the e2e modules share. All of tests/e2e is one xdist unit
(tests/fixtures/parallel.py), so one worker starts each of them once, and package scope
stops them when that worker leaves tests/e2e."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.tiny_tasks import PRELOAD, TaskModels, build_task_models, write_task_catalog
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="package")
def tiny_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    model_dir = build_tiny_embedder(root / "model")
    catalog = root / "catalog"
    write_catalog_entry(catalog, model_dir)
    return catalog


@pytest.fixture(scope="package")
def task_models(tmp_path_factory: pytest.TempPathFactory) -> TaskModels:
    return build_task_models(tmp_path_factory.mktemp("tiny-tasks"))


@pytest.fixture(scope="package")
def server(
    tmp_path_factory: pytest.TempPathFactory, tiny_catalog: Path, task_models: TaskModels
) -> Iterator[ServerProcess]:
    """The real default model; the tiny task models of tests/e2e/tiny_tasks.py, preloaded; and the
    tiny embedder of ``tiny_catalog`` in the catalog, not preloaded (a cold load is tested)."""
    root = tmp_path_factory.mktemp("server")
    catalog = root / "catalog"
    write_catalog_entry(catalog, tiny_catalog.parent / "model")
    write_task_catalog(catalog, task_models)
    preload = [arg for name in PRELOAD for arg in ("--preload", name)]
    proc = start_server(
        # A long queue timeout: on a loaded 2-core machine the default 30 s can expire behind the
        # concurrency tests' large blocking requests (queue timeouts are tested on servers of their own).
        ["--catalog", str(catalog), *preload, "--trace-file", str(root / "trace.jsonl"), "--queue-timeout-s", "120"],
        root / "server.log",
    )
    proc.trace_path = root / "trace.jsonl"  # type: ignore[attr-defined]
    yield proc
    proc.stop()


@pytest.fixture(scope="package")
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
