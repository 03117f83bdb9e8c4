"""Issue 36 items 2 and 3 on a tiny embedder: a load with ``auto``'s decision
recorded opens the chosen runtime without importing PyTorch; the decision
itself runs in a child process while the server serves on PyTorch, which
switches when the child records it; a failing child leaves it on PyTorch."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters.backends import choice
from sift_server.adapters.base import Adapter
from sift_server.engine.model_engine import ModelEngine
from sift_server.engine.policy import ImmediatePolicy
from sift_server.registry.catalog import Catalog, ModelSpec
from sift_server.registry.deciding import ChildDecisions
from sift_server.registry.loader import load_adapter
from sift_server.registry.registry import Registry
from sift_server.registry.switching import SwitchingAdapter
from tests.fixtures.tiny_embedder import build_tiny_embedder

MB = 2**20


def entry(folder: Path) -> ModelSpec:
    return ModelSpec(
        name="tiny", adapter="sentence-embedder", source={"path": str(folder)}, tasks=["encode"], backend="auto"
    )


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_embedder(tmp_path_factory.mktemp("tiny-embedder"))


@pytest.fixture(scope="module")
def decided_cache(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache whose recorded decision is ONNX fp32 (as auto may choose on any
    machine; set here so that the outcome does not depend on this one's timing)."""
    cache = tmp_path_factory.mktemp("cache")
    load_adapter(entry(model), 1, cache_dir=cache).close()
    [decision] = (cache / "decisions").glob("*.json")
    record = json.loads(decision.read_text())
    decision.write_text(json.dumps({**record, "choice": "onnx/fp32"}))
    return cache


LOAD_AND_LIST_MODULES = """
import json, sys
from pathlib import Path
from sift_server.registry.catalog import ModelSpec
from sift_server.registry.loader import load_adapter
spec = ModelSpec.model_validate(json.loads(sys.argv[1]))
adapter = load_adapter(spec, 1, cache_dir=Path(sys.argv[2]))
print(json.dumps({"runtime": adapter.info.runtime,
                  "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def test_a_load_with_a_recorded_decision_does_not_import_torch(model: Path, decided_cache: Path) -> None:
    spec = json.dumps(entry(model).model_dump(mode="json"))
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_LIST_MODULES, spec, str(decided_cache)],
        capture_output=True,
        text=True,
        check=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["runtime"]["backend"] == "onnx" and seen["runtime"]["selected_by"] == "auto (recorded)"
    assert not seen["torch"] and not seen["transformers"]


def registry(model: Path, decisions: ChildDecisions) -> Registry:
    def factory(spec: ModelSpec, adapter: Adapter, curve: object) -> ModelEngine:
        return ModelEngine(spec.name, adapter.forward, ImmediatePolicy())

    loader: Any = lambda spec: load_adapter(spec, 1, cache_dir=decisions.cache_dir)  # noqa: E731
    return Registry(Catalog([entry(model)]), factory, memory_budget_bytes=1000 * MB, loader=loader, decisions=decisions)


async def test_a_recorded_decision_loads_once_without_a_first_copy(model: Path, decided_cache: Path) -> None:
    reg = registry(model, ChildDecisions(torch_threads=1, cache_dir=decided_cache))
    record = await reg.load_now("tiny")
    assert not isinstance(record.adapter, SwitchingAdapter) and record.decide_task is None
    assert record.adapter is not None and record.adapter.info.runtime["backend"] == "onnx"
    await reg.close(0.0)


async def test_the_decision_runs_in_a_child_and_the_server_switches_when_it_lands(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_here(*args: object, **kwargs: object) -> None:
        raise AssertionError("the serving process decided")

    monkeypatch.setattr(choice, "_decide", not_here)  # this process only: the child is another interpreter
    reg = registry(model, ChildDecisions(torch_threads=1, cache_dir=tmp_path))
    record = await reg.load_now("tiny")
    adapter = record.adapter
    assert isinstance(adapter, SwitchingAdapter) and adapter.info.runtime["backend"] == "torch"
    assert record.decide_task is not None
    # While deciding, the budget counts the child's copies next to the serving one.
    assert record.memory_bytes > adapter.current.memory_bytes()
    await record.decide_task
    assert adapter.switches == 1 and "pending" not in adapter.info.runtime
    assert adapter.info.runtime["selected_by"] == "auto (recorded)"
    assert record.memory_bytes == adapter.current.memory_bytes()
    assert list((tmp_path / "decisions").glob("*.json"))
    await reg.close(0.0)


async def test_a_failing_child_leaves_the_server_on_torch_with_a_warning(
    model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failing = ChildDecisions(torch_threads=1, cache_dir=tmp_path, command=(sys.executable, "-c", "raise SystemExit(3)"))
    reg = registry(model, failing)
    record = await reg.load_now("tiny")
    assert record.decide_task is not None and record.adapter is not None
    with caplog.at_level(logging.WARNING, logger="sift_server.registry.registry"):
        await record.decide_task
    runtime = record.adapter.info.runtime
    assert runtime["backend"] == "torch" and "status 3" in runtime["decision"]
    assert any("backend decision failed" in r.getMessage() for r in caplog.records)
    await reg.close(0.0)


def test_models_prepare_records_the_decision_ahead(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sift_server.cli import main

    monkeypatch.delenv("SIFT_BACKEND", raising=False)  # the suite pins torch:fp32
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "tiny.yaml").write_text(
        f"name: tiny\nadapter: sentence-embedder\nsource: {{path: {model}}}\ntasks: [encode]\nbackend: auto\n"
    )
    cache = tmp_path / "cache"
    argv = ["models", "prepare", "tiny", "--catalog", str(catalog), "--cache-dir", str(cache), "--torch-threads", "1"]
    assert main(argv) == 0
    assert "tiny: " in capsys.readouterr().out
    assert list((cache / "decisions").glob("*.json"))
    assert main(["models", "prepare", "no/such", "--catalog", str(catalog)]) == 2
