"""The loader imports transformers' model code (lean) only where the load will use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters.backends.choice import NotDecided
from sift_server.adapters.base import LoadContext
from sift_server.registry import loader
from sift_server.registry.catalog import load_spec


class Recorder:
    transformers_models = True
    loads_runtime_without_torch = True
    loaded: list[str]

    @classmethod
    def load(cls, ctx: LoadContext) -> Any:
        cls.loaded.append(ctx.backend)


class NoTransformers(Recorder):
    transformers_models = False


class TorchAnyway(Recorder):
    """Its load imports transformers on any runtime: the model code is imported lean first."""

    loads_runtime_without_torch = False


class Undecided(Recorder):
    """An ``auto`` entry with no recorded decision: the recorded-only attempt raises."""

    @classmethod
    def load(cls, ctx: LoadContext) -> Any:
        if ctx.recorded_only:
            raise NotDecided("nothing recorded")
        cls.loaded.append(ctx.backend)


def entry(tmp_path: Path, backend: str) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    path = tmp_path / f"{backend}.yaml"
    path.write_text(
        f"name: m\nadapter: sentence-embedder\nsource: {{path: {folder}}}\ntasks: [encode]\nbackend: {backend}\n"
    )
    return path


@pytest.mark.parametrize(
    ("adapter", "backend", "imports"),
    [
        (Recorder, "torch", True),
        (Recorder, "auto", False),  # the decision is recorded: the chosen runtime opens alone
        (Undecided, "auto", True),
        (TorchAnyway, "auto", True),
        (Recorder, "onnx", False),
        (NoTransformers, "torch", False),
        (NoTransformers, "auto", False),
    ],
)
def test_model_code_is_imported_only_for_adapters_that_build_transformers_models(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, adapter: type[Recorder], backend: str, imports: bool
) -> None:
    monkeypatch.delenv("SIFT_BACKEND", raising=False)  # the suite pins torch:fp32
    calls: list[None] = []
    monkeypatch.setattr(loader, "import_transformers_models", lambda: calls.append(None))
    monkeypatch.setattr(loader, "adapter_class", lambda name: adapter)
    adapter.loaded = []
    loader.load_adapter(load_spec(entry(tmp_path, backend)), torch_threads=1)
    assert adapter.loaded == [backend]
    assert len(calls) == (1 if imports else 0)
