"""GLiNER on ONNX Runtime and OpenVINO: parity with PyTorch on the tiny GLiNER,
the export into the artifact cache, explicit threads, and ``auto``'s span rule.

Every test shares one cache folder, so the tiny GLiNER is exported (and converted
to OpenVINO IR) once per session however many tests load it; ``auto`` tests that
must decide afresh use a tolerance of their own (part of the decision key)
instead of a fresh cache."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters.backends import timing
from sift_server.adapters.backends.request import REFERENCE, Choice
from sift_server.adapters.base import ExtractTask, LoadContext, Part
from sift_server.adapters.gliner import graph as runtimes
from sift_server.adapters.gliner.adapter import GlinerAdapter
from tests.adapters.conftest import serving_one_entry
from tests.adapters.test_gliner import LABELS, TEXTS, THRESHOLD

# Largest score difference from PyTorch on the tiny random GLiNER: float rounding on both
# runtimes (OpenVINO's ~1e-4 before its IR's LSTM rewrite, see backends/openvino_ir.py).
SCORE_TOL = {"onnx": 1e-5, "openvino": 1e-5}


@pytest.fixture(scope="session")
def gliner_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gliner-artifacts")


def context(path: Path, cache: Path, backend: str, precision: str | None = None, **kw: Any) -> LoadContext:
    return LoadContext(
        path=path,
        options={"device": "cpu", "threshold": THRESHOLD},
        max_sequence_length=None,
        torch_threads=1,
        backend=backend,
        precision=precision,
        cache_dir=cache,
        **kw,
    )


def extract(adapter: GlinerAdapter) -> list[list[dict[str, Any]]]:
    prepared = adapter.prepare(ExtractTask(texts=TEXTS, labels=LABELS, threshold=THRESHOLD))
    [items] = adapter.forward([Part(prepared, 0, len(TEXTS))])
    return [item["entities"] for item in items]


def assert_same_spans(got: list[list[dict[str, Any]]], expected: list[list[dict[str, Any]]], tol: float) -> None:
    key = [[(e["start"], e["end"], e["label"], e["text"]) for e in entities] for entities in expected]
    assert [[(e["start"], e["end"], e["label"], e["text"]) for e in entities] for entities in got] == key
    for found, reference in zip(got, expected, strict=True):
        for a, b in zip(found, reference, strict=True):
            assert abs(a["score"] - b["score"]) <= tol


@pytest.fixture(scope="session")
def torch_entities(gliner_dir: Path, gliner_cache: Path) -> list[list[dict[str, Any]]]:
    entities = extract(GlinerAdapter.load(context(gliner_dir, gliner_cache, "torch", "fp32")))
    assert sum(map(len, entities)) >= len(TEXTS)  # not vacuous
    return entities


# ---- explicit backends -------------------------------------------------------


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_gliner_runtime_gives_torchs_entities(
    gliner_dir: Path, gliner_cache: Path, torch_entities: list[list[dict[str, Any]]], backend: str
) -> None:
    adapter = GlinerAdapter.load(context(gliner_dir, gliner_cache, backend, "fp32"))
    runtime = adapter.info.runtime
    assert (runtime["backend"], runtime["precision"], runtime["selected_by"]) == (backend, "fp32", "catalog")
    assert adapter.model.is_runtime_model
    assert_same_spans(extract(adapter), torch_entities, SCORE_TOL[backend])
    assert adapter.memory_bytes() > 0


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_gliner_runtime_grouped_by_length_gives_torchs_entities(
    gliner_dir: Path,
    gliner_cache: Path,
    torch_entities: list[list[dict[str, Any]]],
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With free calls every distinct length runs as its own library call, shortest
    first (not the texts' order): each text still gets PyTorch's entities."""
    adapter = GlinerAdapter.load(context(gliner_dir, gliner_cache, backend, "fp32"))
    model = adapter.backend.model
    calls: list[list[str]] = []

    def counting(texts: list[str], *args: Any, **kwargs: Any) -> Any:
        calls.append(list(texts))
        return model.inference(texts, *args, **kwargs)

    monkeypatch.setattr(runtimes, "CALL_COST_TOKENS", 0)
    monkeypatch.setattr(adapter.backend, "model", _Shim(model, counting))
    assert_same_spans(extract(adapter), torch_entities, SCORE_TOL[backend])
    assert len(calls) > 1 and sorted(t for call in calls for t in call) == sorted(TEXTS)
    assert [t for call in calls for t in call] != TEXTS  # the groups ran out of the texts' order


def test_gliner_runtime_runs_one_padded_call_when_calls_are_dear(
    gliner_dir: Path, gliner_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = GlinerAdapter.load(context(gliner_dir, gliner_cache, "onnx", "fp32"))
    model = adapter.backend.model
    calls: list[int] = []

    def counting(texts: list[str], *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["batch_size"])
        return model.inference(texts, *args, **kwargs)

    monkeypatch.setattr(runtimes, "CALL_COST_TOKENS", 10**6)
    monkeypatch.setattr(adapter.backend, "model", _Shim(model, counting))
    extract(adapter)
    assert calls == [len(TEXTS)]


def test_grouped_inference_puts_each_texts_entities_back_in_place() -> None:
    """A stand-in model answers each text with an entity naming it: the answer for
    text i must be text i's, whatever order the groups ran in."""

    class Echo:
        def inference(self, texts: list[str], labels: list[str], **kwargs: Any) -> list[list[dict[str, Any]]]:
            assert kwargs["batch_size"] == len(texts)
            return [[{"text": t, "label": labels[0]}] for t in texts]

    texts = [f"text {i}" for i in range(40)]
    lengths = [(i * 7919) % 53 + 5 for i in range(40)]  # shuffled lengths, some repeated
    backend = runtimes.GlinerBackend(Echo(), Choice("onnx", "fp32"), "fp32")
    found = backend.inference(texts, lengths, ["x"], flat_ner=True, threshold=0.5, multi_label=False)
    assert [entities[0]["text"] for entities in found] == texts


class _Shim:
    """The GLiNER with its ``inference`` replaced (the adapter's other uses pass through)."""

    def __init__(self, inner: Any, inference: Any) -> None:
        self._inner = inner
        self.inference = inference

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_gliner_export_folder_holds_what_from_pretrained_needs(gliner_dir: Path, gliner_cache: Path) -> None:
    GlinerAdapter.load(context(gliner_dir, gliner_cache, "openvino", "fp32"))
    [onnx] = [p for p in (gliner_cache / "onnx").iterdir() if (p / "gliner_config.json").is_file()]
    [vino] = [p for p in (gliner_cache / "openvino").iterdir() if (p / "gliner_config.json").is_file()]
    for folder, graph in ((onnx, "model.onnx"), (vino, "model.xml")):
        names = {p.name for p in folder.iterdir()}
        assert {graph, "gliner_config.json", "tokenizer_config.json", "manifest.json"} <= names
        assert artifacts_verify(folder)


def artifacts_verify(folder: Path) -> bool:
    from sift_server.adapters.backends import artifacts

    return artifacts.verify(folder)


def test_gliner_first_export_logs_progress_and_a_hit_loads_directly(
    gliner_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="sift_server.adapters.backends.artifacts"):
        GlinerAdapter.load(context(gliner_dir, tmp_path, "onnx", "fp32"))
    assert any("exporting" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sift_server.adapters.backends.artifacts"):
        GlinerAdapter.load(context(gliner_dir, tmp_path, "onnx", "fp32"))
    messages = [r.getMessage() for r in caplog.records]
    assert any("using cached" in m for m in messages)
    assert not any("exporting" in m for m in messages)


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_gliner_cache_hit_never_builds_the_pytorch_model(
    gliner_dir: Path, gliner_cache: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    exported = extract(GlinerAdapter.load(context(gliner_dir, gliner_cache, backend, "fp32")))

    def refuse(self: runtimes.GlinerGraph) -> Any:
        raise AssertionError("a cache hit loaded the PyTorch GLiNER")

    monkeypatch.setattr(runtimes.GlinerGraph, "build_module", refuse)
    again = GlinerAdapter.load(context(gliner_dir, gliner_cache, backend, "fp32"))
    assert extract(again) == exported


def test_gliner_threads_are_explicit(gliner_dir: Path, gliner_cache: Path) -> None:
    onnx = GlinerAdapter.load(context(gliner_dir, gliner_cache, "onnx", "fp32"))
    options = onnx.model.model.session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert (onnx.info.runtime["intra_op_threads"], onnx.info.runtime["inter_op_threads"]) == (1, 1)
    vino = GlinerAdapter.load(context(gliner_dir, gliner_cache, "openvino", "fp32"))
    compiled = vino.model.model.compiled_model
    assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 1
    assert vino.info.runtime["inference_num_threads"] == 1


def test_gliner_openvino_bf16_and_onnx_int8_load(gliner_dir: Path, gliner_cache: Path) -> None:
    # Reduced precisions may move a span of a random model: only that they run.
    bf16 = GlinerAdapter.load(context(gliner_dir, gliner_cache, "openvino", "bf16"))
    assert bf16.info.runtime["precision"] in ("bf16", "fp32")  # fp32 where the CPU lacks bf16
    int8 = GlinerAdapter.load(context(gliner_dir, gliner_cache, "onnx", "int8"))
    assert (int8.info.runtime["backend"], int8.info.runtime["precision"]) == ("onnx", "int8")
    for adapter in (bf16, int8):
        assert len(extract(adapter)) == len(TEXTS)


def test_gliner_torch_at_a_reduced_precision_runs_fp32(gliner_dir: Path, gliner_cache: Path) -> None:
    # ``--backend torch:bf16`` applies to every entry; GLiNER's PyTorch path is fp32 only.
    adapter = GlinerAdapter.load(context(gliner_dir, gliner_cache, "torch", "bf16"))
    assert (adapter.info.runtime["backend"], adapter.info.runtime["precision"]) == ("torch", "fp32")


# ---- auto --------------------------------------------------------------------


def test_gliner_auto_records_a_decision_and_reuses_it(
    gliner_dir: Path, gliner_cache: Path, torch_entities: list[list[dict[str, Any]]]
) -> None:
    first = GlinerAdapter.load(context(gliner_dir, gliner_cache, "auto"))
    runtime = first.info.runtime
    assert runtime["selected_by"] == "auto"
    measured = runtime["measured"]
    assert {"torch/fp32", "onnx/fp32", "openvino/fp32"} <= set(measured)
    assert "onnx/int8" not in measured  # never auto
    assert measured["onnx/fp32"]["passed"] and measured["openvino/fp32"]["passed"]
    chosen = f"{runtime['backend']}/{runtime['precision']}"
    assert measured[chosen]["passed"]
    assert runtime["timing"]["rounds"] == timing.TIMING_ROUNDS
    # The reference's own figure on the rule's scale: no score difference (1.0 means a span moved).
    assert measured["torch/fp32"]["agreement"] == 0.0
    timed = [v for v in measured.values() if v["passed"]]
    assert all(len(v["samples"]) == timing.TIMING_ROUNDS for v in timed)
    assert_same_spans(extract(first), torch_entities, runtimes.DEFAULT_SCORE_TOLERANCE)

    second = GlinerAdapter.load(context(gliner_dir, gliner_cache, "auto"))
    assert second.info.runtime["selected_by"] == "auto (recorded)"
    assert (second.info.runtime["backend"], second.info.runtime["precision"]) == (
        runtime["backend"],
        runtime["precision"],
    )


class _RelabelFirstSpan:
    """A GLiNER whose first entity of every text gets another label: one moved span."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def inference(self, *args: Any, **kwargs: Any) -> list[list[dict[str, Any]]]:
        found: list[list[dict[str, Any]]] = self._inner.inference(*args, **kwargs)
        return [[{**e, "label": e["label"] + "!"} if i == 0 else e for i, e in enumerate(es)] for es in found]


def test_gliner_auto_falls_back_to_torch_when_a_span_moves(
    gliner_dir: Path, gliner_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = runtimes.open_gliner

    def open_gliner(graph: Any, choice: Choice, request: Any, store: Any) -> runtimes.GlinerBackend:
        opened = real(graph, choice, request, store)
        if choice != REFERENCE:
            opened.model = _RelabelFirstSpan(opened.model)
        return opened

    monkeypatch.setattr(runtimes, "open_gliner", open_gliner)
    # A tolerance of its own: a fresh decision over the session's exports.
    adapter = GlinerAdapter.load(context(gliner_dir, gliner_cache, "auto", tolerance=2e-3))
    runtime = adapter.info.runtime
    assert (runtime["backend"], runtime["precision"], runtime["selected_by"]) == ("torch", "fp32", "auto")
    others = {k: v for k, v in runtime["measured"].items() if k != "torch/fp32"}
    assert others and not any(v["passed"] for v in others.values())
    assert all(v.get("agreement") == 1.0 for v in others.values() if "agreement" in v)
    assert runtime["timing"]["rounds"] == 0  # only the reference passed: nothing timed


# ---- the agreement rule --------------------------------------------------------


def test_span_agreement_needs_identical_spans_and_close_scores() -> None:
    agree = runtimes.span_agreement(1e-3)
    reference = [[(0, 5, "person", 0.9), (10, 16, "location", 0.6)], []]
    assert agree(reference, reference) == (True, 0.0)
    reordered = [[(10, 16, "location", 0.6), (0, 5, "person", 0.9)], []]
    assert agree(reordered, reference)[0]
    ok, worst = agree([[(0, 5, "person", 0.9005), (10, 16, "location", 0.6)], []], reference)
    assert ok and worst == pytest.approx(5e-4)
    assert agree([[(0, 5, "person", 0.902), (10, 16, "location", 0.6)], []], reference)[0] is False
    assert agree([[(0, 5, "person", 0.9)], []], reference) == (False, 1.0)  # a span vanished
    assert agree([[(0, 5, "person", 0.9), (10, 16, "organization", 0.6)], []], reference) == (False, 1.0)
    assert agree([[(0, 4, "person", 0.9), (10, 16, "location", 0.6)], []], reference) == (False, 1.0)
    assert agree([[(0, 5, "person", 0.9), (10, 16, "location", 0.6)], [(1, 2, "date", 0.7)]], reference) == (
        False,
        1.0,
    )


# ---- what /v1/models shows -----------------------------------------------------


async def test_gliner_models_listing_shows_what_runs(
    gliner_dir: Path, gliner_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIFT_BACKEND", raising=False)  # the suite's default pins torch:fp32
    monkeypatch.setenv("SIFT_CACHE_DIR", str(gliner_cache))  # the graph exported once for the module
    entry = (
        f"adapter: gliner\nsource: {{path: {gliner_dir}}}\ntasks: [extract]\n"
        "backend: onnx\nprecision: fp32\noptions: {threshold: 0.3}\n"
    )
    async with serving_one_entry(tmp_path, "tiny/gliner-onnx", entry) as client:
        info = (await client.get("/v1/models/tiny/gliner-onnx")).json()
        body = {"items": [{"text": TEXTS[0]}], "params": {"labels": LABELS}}
        extracted = await client.post("/v1/extract/tiny/gliner-onnx", json=body)
    assert extracted.status_code == 200, extracted.text
    runtime = info["runtime"]
    assert (runtime["backend"], runtime["precision"], runtime["selected_by"]) == ("onnx", "fp32", "catalog")
    assert (runtime["intra_op_threads"], runtime["inter_op_threads"]) == (1, 1)
