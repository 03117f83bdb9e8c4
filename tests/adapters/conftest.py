"""Tiny models for the adapter tests, built once per session, and adapters loaded
from them through the real ``Adapter.load`` path. Everything runs on CPU and
offline."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sift_server.adapters.base import LoadContext
from sift_server.adapters.cross_encoder import CrossEncoderAdapter
from sift_server.adapters.gliclass.adapter import GliClassAdapter
from sift_server.adapters.gliner.adapter import GlinerAdapter
from tests.fixtures.tiny_models import build_tiny_cross_encoder, build_tiny_gliclass, build_tiny_gliner

if TYPE_CHECKING:
    import httpx


def pytest_configure(config: pytest.Config) -> None:
    # Runs before this directory's test modules import any Hugging Face library
    # (the root conftest does the same; this keeps the folder safe on its own).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load_context(path: Path, max_sequence_length: int | None = None, **options: Any) -> LoadContext:
    """A CPU load context (parity references run on CPU too)."""
    merged: Mapping[str, Any] = {"device": "cpu", **options}
    return LoadContext(path=path, options=merged, max_sequence_length=max_sequence_length, torch_threads=0)


@contextlib.asynccontextmanager
async def serving_one_entry(folder: Path, name: str, entry: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app (lifespan included) serving one catalog entry, ``entry`` being the
    YAML after its name line, written under ``folder``; an in-process client."""
    import httpx

    from sift_server.api.app import create_app
    from sift_server.composition import build_state
    from sift_server.config import Settings
    from sift_server.registry.catalog import Catalog

    catalog = folder / "catalog"
    catalog.mkdir()
    (catalog / "entry.yaml").write_text(f"name: {name}\n{entry}")
    settings = Settings(default_model=name, catalog=[catalog], torch_threads=1, calibrate=False)
    app = create_app(build_state(settings, catalog=Catalog.from_dirs([catalog], include_shipped=False)))
    transport = httpx.ASGITransport(app=app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as client:
        yield client


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("cross_encoder"))


@pytest.fixture(scope="session")
def gliner_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gliner(tmp_path_factory.mktemp("gliner"))


@pytest.fixture(scope="session")
def gliclass_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gliclass(tmp_path_factory.mktemp("gliclass"))


@pytest.fixture(scope="session")
def cross_encoder(cross_encoder_dir: Path) -> CrossEncoderAdapter:
    return CrossEncoderAdapter.load(load_context(cross_encoder_dir))


@pytest.fixture(scope="session")
def gliner(gliner_dir: Path) -> GlinerAdapter:
    return GlinerAdapter.load(load_context(gliner_dir, threshold=0.3))


@pytest.fixture(scope="session")
def gliclass(gliclass_dir: Path) -> GliClassAdapter:
    return GliClassAdapter.load(load_context(gliclass_dir))
