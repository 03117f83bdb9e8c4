"""GLiClass on ONNX Runtime and OpenVINO: parity with PyTorch fp32 on the tiny
GLiClass (labels in the same order, scores within tolerance, in both modes, with
label groups of different sizes), the export into the artifact cache, explicit
threads, and ``auto``'s rank rule.

Every test shares one cache folder, so the tiny GLiClass is exported (and
converted to OpenVINO IR) once per session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters.backends import runners, timing
from sift_server.adapters.base import ExtractTask, LoadContext, Part
from sift_server.adapters.gliclass import graph as runtimes
from sift_server.adapters.gliclass.adapter import GliClassAdapter
from tests.adapters.test_gliclass import LABELS, TEXTS

# Largest score difference from PyTorch fp32 allowed here: ONNX Runtime and OpenVINO
# fp32 differ from it by float32 rounding only, far inside auto's 1e-3.
SCORE_TOL = 1e-5
GROUPS = (("tone", ("positive", "negative")), ("topic", ("finance", "sports", "politics")))


@pytest.fixture(scope="session")
def gliclass_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gliclass-artifacts")


def context(path: Path, cache: Path, backend: str, precision: str | None = None, **kw: Any) -> LoadContext:
    return LoadContext(
        path=path,
        options={"device": "cpu"},
        max_sequence_length=None,
        torch_threads=1,
        backend=backend,
        precision=precision,
        cache_dir=cache,
        **kw,
    )


def classify(adapter: GliClassAdapter) -> list[list[dict[str, Any]]]:
    """Classifications of three requests fused into one forward: multi-label,
    single-label and label groups of two sizes."""
    tasks = [
        ExtractTask(texts=TEXTS, labels=LABELS),
        ExtractTask(texts=TEXTS, labels=LABELS, classification_type="single-label"),
        ExtractTask(texts=TEXTS, labels=(), label_groups=GROUPS),
    ]
    prepared = [adapter.prepare(task) for task in tasks]
    outputs = adapter.forward([Part(p, 0, len(TEXTS)) for p in prepared])
    return [item["classifications"] for items in outputs for item in items]


def assert_same_classes(got: list[list[dict[str, Any]]], expected: list[list[dict[str, Any]]], tol: float) -> None:
    assert [[c["label"] for c in found] for found in got] == [[c["label"] for c in found] for found in expected]
    for found, reference in zip(got, expected, strict=True):
        for a, b in zip(found, reference, strict=True):
            assert abs(a["score"] - b["score"]) <= tol


@pytest.fixture(scope="session")
def torch_classes(gliclass_dir: Path, gliclass_cache: Path) -> list[list[dict[str, Any]]]:
    found = classify(GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "torch", "fp32")))
    assert len(found) == 3 * len(TEXTS) and all(found)  # not vacuous
    return found


# ---- explicit backends -------------------------------------------------------


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_gliclass_runtime_gives_torchs_classes(
    gliclass_dir: Path, gliclass_cache: Path, torch_classes: list[list[dict[str, Any]]], backend: str
) -> None:
    adapter = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, backend, "fp32"))
    runtime = adapter.info.runtime
    assert (runtime["backend"], runtime["precision"], runtime["selected_by"]) == (backend, "fp32", "catalog")
    assert isinstance(adapter.model, runtimes.RunnerModel)
    assert_same_classes(classify(adapter), torch_classes, SCORE_TOL)
    assert adapter.memory_bytes() > 0


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_gliclass_runtime_grouped_by_length_gives_torchs_classes(
    gliclass_dir: Path,
    gliclass_cache: Path,
    torch_classes: list[list[dict[str, Any]]],
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With free calls every distinct length runs as its own group, cut to its
    length: the classes are still PyTorch's padded batch's."""
    from sift_server.adapters.backends import buckets

    adapter = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, backend, "fp32"))
    runner = adapter.model.runner
    widths: list[int] = []

    def counting(feed: Any) -> Any:
        widths.append(feed["attention_mask"].shape[1])
        return runner(feed)

    counting.choice = runner.choice  # type: ignore[attr-defined]
    monkeypatch.setattr(buckets, "CALL_COST_TOKENS", 0)
    monkeypatch.setattr(adapter.model, "runner", counting)
    assert_same_classes(classify(adapter), torch_classes, SCORE_TOL)
    assert len(set(widths)) > 1  # groups of different lengths really ran


def test_gliclass_export_is_cached_and_keyed_by_the_slot_axis(gliclass_dir: Path, gliclass_cache: Path) -> None:
    import onnx

    GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "onnx", "fp32"))
    [folder] = [p for p in (gliclass_cache / "onnx").iterdir() if p.is_dir() and not p.name.startswith(".")]
    graph = onnx.load(str(folder / "model.onnx"))
    names = [i.name for i in graph.graph.input]
    assert names[-1] == runtimes.SLOTS and names[0] == "input_ids"
    slots = graph.graph.input[-1].type.tensor_type.shape.dim
    assert not slots[1].HasField("dim_value")  # the class axis is dynamic, not the traced size
    mtime = (folder / "model.onnx").stat().st_mtime_ns
    GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "onnx", "fp32"))
    assert (folder / "model.onnx").stat().st_mtime_ns == mtime  # reused, not exported again


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_gliclass_cache_hit_never_builds_the_pytorch_model(
    gliclass_dir: Path, gliclass_cache: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    exported = classify(GliClassAdapter.load(context(gliclass_dir, gliclass_cache, backend, "fp32")))

    def refuse(self: runtimes.GliClassGraph) -> Any:
        raise AssertionError("the PyTorch model was built on a cache hit")

    monkeypatch.setattr(runtimes.GliClassGraph, "build_module", refuse)
    again = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, backend, "fp32"))
    assert classify(again) == exported


def test_gliclass_threads_are_explicit(gliclass_dir: Path, gliclass_cache: Path) -> None:
    onnx = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "onnx", "fp32"))
    runner = onnx.backend
    assert isinstance(runner, runners.OnnxRunner)
    options = runner.session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    vino = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "openvino", "fp32"))
    assert isinstance(vino.backend, runners.OpenVinoRunner)
    assert int(vino.backend.compiled.get_property("INFERENCE_NUM_THREADS")) == 1
    assert vino.info.runtime["inference_num_threads"] == 1


def test_gliclass_reduced_precisions_load(gliclass_dir: Path, gliclass_cache: Path) -> None:
    # Reduced precisions may reorder labels of a random model: only that they run.
    bf16 = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "openvino", "bf16"))
    assert bf16.info.runtime["precision"] in ("bf16", "fp32")  # fp32 where the CPU lacks bf16
    int8 = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "onnx", "int8"))
    assert (int8.info.runtime["backend"], int8.info.runtime["precision"]) == ("onnx", "int8")
    for adapter in (bf16, int8):
        assert len(classify(adapter)) == 3 * len(TEXTS)


def test_gliclass_torch_at_a_reduced_precision_runs_fp32(gliclass_dir: Path, gliclass_cache: Path) -> None:
    # ``--backend torch:bf16`` applies to every entry; GLiClass's PyTorch path is fp32 only.
    adapter = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "torch", "bf16"))
    assert (adapter.info.runtime["backend"], adapter.info.runtime["precision"]) == ("torch", "fp32")


def test_a_runtime_refuses_lora_adapter_ids(gliclass_dir: Path, gliclass_cache: Path) -> None:
    adapter = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "onnx", "fp32"))
    with pytest.raises(ValueError, match="torch backend only"):
        adapter.model(input_ids=None, adapter_ids=["a"])


# ---- auto --------------------------------------------------------------------


def test_gliclass_auto_records_a_decision_and_reuses_it(
    gliclass_dir: Path, gliclass_cache: Path, torch_classes: list[list[dict[str, Any]]]
) -> None:
    first = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "auto"))
    runtime = first.info.runtime
    assert runtime["selected_by"] == "auto"
    measured = runtime["measured"]
    assert {"torch/fp32", "onnx/fp32", "openvino/fp32"} <= set(measured)
    assert "onnx/int8" not in measured and "torch/bf16" not in measured
    assert measured["onnx/fp32"]["passed"] and measured["openvino/fp32"]["passed"]
    assert measured["onnx/fp32"]["agreement"] <= SCORE_TOL
    assert measured["torch/fp32"]["agreement"] == 0.0
    chosen = f"{runtime['backend']}/{runtime['precision']}"
    assert measured[chosen]["passed"]
    assert runtime["timing"]["rounds"] == timing.TIMING_ROUNDS
    assert_same_classes(classify(first), torch_classes, runtimes.DEFAULT_SCORE_TOLERANCE)

    second = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "auto"))
    assert second.info.runtime["selected_by"] == "auto (recorded)"
    assert (second.info.runtime["backend"], second.info.runtime["precision"]) == (
        runtime["backend"],
        runtime["precision"],
    )


def test_gliclass_auto_falls_back_to_torch_when_labels_reorder(
    gliclass_dir: Path, gliclass_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = runtimes.probabilities

    def swapped(logits: np.ndarray, labels: int, single_label: bool) -> np.ndarray:
        # Every non-reference runner's probe scores with the first two labels swapped.
        scores = real(logits, labels, single_label)
        if swapped.calls > 0:
            scores = scores[:, [1, 0, *range(2, labels)]]
        swapped.calls += 1
        return scores

    swapped.calls = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(runtimes, "probabilities", swapped)
    # A tolerance of its own: part of the decision key, so this decides afresh.
    adapter = GliClassAdapter.load(context(gliclass_dir, gliclass_cache, "auto", tolerance=2e-3))
    runtime = adapter.info.runtime
    assert (runtime["backend"], runtime["precision"]) == ("torch", "fp32")
    assert runtime["measured"]["onnx/fp32"] == {"agreement": 1.0, "passed": False}
    assert runtime["measured"]["openvino/fp32"] == {"agreement": 1.0, "passed": False}


def test_rank_agreement() -> None:
    agree = runtimes.rank_agreement(1e-3)
    expected = np.array([[0.9, 0.5, 0.1], [0.2, 0.3, 0.4]])
    assert agree(expected + 5e-4, expected) == (True, pytest.approx(5e-4))
    assert agree(expected + 2e-3, expected) == (False, pytest.approx(2e-3))
    # Two labels trade places by less than the tolerance: still a different ranking.
    close = np.array([[0.5, 0.5004, 0.1], [0.2, 0.3, 0.4]])
    assert agree(close, np.array([[0.5004, 0.5, 0.1], [0.2, 0.3, 0.4]])) == (False, 1.0)
    assert agree(expected[:1], expected) == (False, 1.0)
