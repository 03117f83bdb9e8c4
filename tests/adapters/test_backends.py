"""Backends behind the adapters: parity of ONNX Runtime and OpenVINO with PyTorch
on tiny models (export included), the artifact cache, and ``auto``'s choice.

Exports are shared by the whole session (one cache folder), so each tiny model
is exported once however many tests load it; a test that needs a cache without
recorded decisions gets a copy of that folder's exports, and only the test about
rebuilding a corrupted export exports again."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters.backends import agreement, artifacts, runners, timing
from sift_server.adapters.backends import request as vocabulary
from sift_server.adapters.backends import runtimes as runtime_settings
from sift_server.adapters.backends import store as stores
from sift_server.adapters.backends.request import REFERENCE, Choice
from sift_server.adapters.backends.seam import Runner
from sift_server.adapters.base import EncodeTask, LoadContext, Part, ScoreTask
from sift_server.adapters.cross_encoder import CrossEncoderAdapter
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from tests.adapters.conftest import serving_one_entry
from tests.fixtures.tiny_embedder import build_tiny_embedder

TEXTS = [
    "a",
    "The committee approved the budget after a long debate on Tuesday.",
    "Vectors, scores and entities!",
    "zebra crossing near the old railway station in the north of the town",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="session")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_embedder(tmp_path_factory.mktemp("tiny-embedder"), seed=3)


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


def embed(adapter: SentenceEmbedderAdapter, texts: list[str]) -> np.ndarray:
    prepared = adapter.prepare(EncodeTask(texts))
    return np.stack(adapter.forward([Part(prepared, 0, len(texts))])[0])


def score(adapter: CrossEncoderAdapter, texts: list[str]) -> np.ndarray:
    prepared = adapter.prepare(ScoreTask("which one is about transport?", texts))
    return np.array(adapter.forward([Part(prepared, 0, len(texts))])[0])


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(agreement.cosine_agreement(1.0)(a, b)[1])


@pytest.fixture(scope="session")
def embedder_exports(embedder_dir: Path, cache_dir: Path) -> Path:
    """The session cache, holding the embedder's ONNX fp32 graph and OpenVINO IR."""
    SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "openvino", "fp32"))
    return cache_dir


@pytest.fixture(scope="session")
def cross_encoder_exports(cross_encoder_dir: Path, cache_dir: Path) -> Path:
    """The session cache, holding the cross-encoder's ONNX fp32 graph and OpenVINO IR."""
    CrossEncoderAdapter.load(context(cross_encoder_dir, cache_dir, "openvino", "fp32"))
    return cache_dir


def copy_exports(cache: Path, folder: Path) -> Path:
    """``folder`` holding ``cache``'s exports but none of its recorded decisions."""
    shutil.copytree(cache, folder, ignore=shutil.ignore_patterns("decisions"), dirs_exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def torch_embeddings(embedder_dir: Path, cache_dir: Path) -> np.ndarray:
    return embed(SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "torch", "fp32")), TEXTS)


@pytest.fixture(scope="session")
def torch_scores(cross_encoder_dir: Path, cache_dir: Path) -> np.ndarray:
    return score(CrossEncoderAdapter.load(context(cross_encoder_dir, cache_dir, "torch", "fp32")), TEXTS)


# ---- parity ------------------------------------------------------------------

# (backend, precision, minimum cosine to PyTorch fp32 on a random tiny model)
EMBEDDER_CASES = [("onnx", "fp32", 0.99999), ("openvino", "fp32", 0.99999), ("onnx", "int8", 0.9)]


@pytest.mark.parametrize(("backend", "precision", "floor"), EMBEDDER_CASES)
def test_embedder_parity(
    embedder_dir: Path, cache_dir: Path, torch_embeddings: np.ndarray, backend: str, precision: str, floor: float
) -> None:
    adapter = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, backend, precision))
    assert adapter.info.runtime["backend"] == backend
    assert adapter.info.runtime["selected_by"] == "catalog"
    got = embed(adapter, TEXTS)
    assert got.shape == torch_embeddings.shape
    assert min_cosine(got, torch_embeddings) >= floor
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_embedder_openvino_bf16_close(embedder_dir: Path, cache_dir: Path, torch_embeddings: np.ndarray) -> None:
    adapter = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "openvino", "bf16"))
    # bf16 where the CPU has it, fp32 where not: close either way.
    assert adapter.info.runtime["precision"] in ("bf16", "fp32")
    assert min_cosine(embed(adapter, TEXTS), torch_embeddings) >= 0.99


def test_openvino_bounds_its_per_shape_kernel_cache(embedder_dir: Path, cache_dir: Path) -> None:
    # Served batches come in every (rows, length): with the plugin's default of 5,000
    # cached shapes a long-running server grew by ~3 MB a request (probes/soak.py).
    adapter = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "openvino", "fp32"))
    config = adapter.runner.config  # type: ignore[attr-defined]
    assert config.get("CPU_RUNTIME_CACHE_CAPACITY") == runtime_settings.OPENVINO_SHAPE_CACHE <= 256


@pytest.mark.parametrize(("backend", "precision"), [("onnx", "fp32"), ("openvino", "fp32")])
def test_cross_encoder_parity(
    cross_encoder_dir: Path, cache_dir: Path, torch_scores: np.ndarray, backend: str, precision: str
) -> None:
    adapter = CrossEncoderAdapter.load(context(cross_encoder_dir, cache_dir, backend, precision))
    assert adapter.info.runtime["backend"] == backend
    got = score(adapter, TEXTS)
    ok, worst = agreement.score_agreement(1e-4)(got, torch_scores)
    assert ok, worst
    assert np.argsort(got).tolist() == np.argsort(torch_scores).tolist()


def test_cross_encoder_int8_loads(cross_encoder_dir: Path, cache_dir: Path, torch_scores: np.ndarray) -> None:
    adapter = CrossEncoderAdapter.load(context(cross_encoder_dir, cache_dir, "onnx", "int8"))
    assert (adapter.info.runtime["backend"], adapter.info.runtime["precision"]) == ("onnx", "int8")
    got = score(adapter, TEXTS)
    assert got.shape == torch_scores.shape and np.isfinite(got).all()


def test_threads_are_explicit(embedder_dir: Path, cache_dir: Path) -> None:
    onnx = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "onnx", "fp32"))
    assert isinstance(onnx.runner, runners.OnnxRunner)
    options = onnx.runner.session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    vino = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "openvino", "fp32"))
    assert isinstance(vino.runner, runners.OpenVinoRunner)
    assert int(vino.runner.compiled.get_property("INFERENCE_NUM_THREADS")) == 1


def test_onnx_sessions_leave_layer_norm_unfused(embedder_dir: Path, cache_dir: Path, tmp_path: Path) -> None:
    # The fused SkipLayerNormalization kernel was the tiny BERT's slowest node.
    import onnx
    import onnxruntime as ort

    runner = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "onnx", "fp32")).runner
    assert isinstance(runner, runners.OnnxRunner)

    def optimized_ops(options: ort.SessionOptions, name: str) -> set[str]:
        options.optimized_model_filepath = str(tmp_path / name)
        ort.InferenceSession(runner.session._model_path, options, providers=["CPUExecutionProvider"])
        return {node.op_type for node in onnx.load(str(tmp_path / name)).graph.node}

    default = ort.SessionOptions()
    default.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert "SkipLayerNormalization" in optimized_ops(default, "default.onnx")
    sift = runtime_settings.onnx_session_options(1)
    sift.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert "SkipLayerNormalization" not in optimized_ops(sift, "sift.onnx")


def test_a_bare_context_runs_torch_fp32_without_probing(embedder_dir: Path) -> None:
    # Parity tests load their references through bare contexts: a reference that
    # chose bf16 by timing made the LoRA parity tests fail at random.
    bare = LoadContext(path=embedder_dir, options={"device": "cpu"}, max_sequence_length=None, torch_threads=1)
    adapter = SentenceEmbedderAdapter.load(bare)
    runtime = adapter.info.runtime
    assert (runtime["backend"], runtime["precision"], runtime["selected_by"]) == ("torch", "fp32", "catalog")


# ---- auto --------------------------------------------------------------------


def test_auto_chooses_a_passing_backend_and_records_it(embedder_dir: Path, cache_dir: Path) -> None:
    first = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "auto"))
    runtime = first.info.runtime
    assert runtime["selected_by"] == "auto"
    chosen = f"{runtime['backend']}/{runtime['precision']}"
    assert runtime["measured"][chosen]["passed"]
    assert "onnx/int8" not in runtime["measured"]  # never auto
    # The figures it was chosen by: a median over interleaved rounds for every passing candidate.
    assert runtime["timing"]["rounds"] == timing.TIMING_ROUNDS
    timed = {k: v for k, v in runtime["measured"].items() if v["passed"]}
    assert all(len(v["samples"]) == timing.TIMING_ROUNDS and v["seconds"] > 0 for v in timed.values())
    second = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "auto"))
    assert second.info.runtime["selected_by"] == "auto (recorded)"
    assert (second.info.runtime["backend"], second.info.runtime["precision"]) == (
        runtime["backend"],
        runtime["precision"],
    )


class Perturbed(Runner):
    """A runner whose outputs are off by enough to miss any tolerance."""

    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.choice = inner.choice
        self.effective_precision = inner.effective_precision

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        out = self.inner(feed)
        rng = np.random.default_rng(0)
        return out + rng.normal(0.0, 0.5, size=out.shape).astype(out.dtype)


@pytest.fixture
def mismatching(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real = stores.open_runner

    def open_runner(graph: Any, choice: Choice, request: Any, store: Any) -> Runner:
        runner = real(graph, choice, request, store)
        return runner if choice == REFERENCE else Perturbed(runner)

    monkeypatch.setattr(stores, "open_runner", open_runner)
    yield


@pytest.mark.usefixtures("mismatching")
def test_auto_falls_back_to_torch_when_others_miss(embedder_dir: Path, embedder_exports: Path, tmp_path: Path) -> None:
    # A cache with no recorded decision: auto decides again, on the session's exports.
    cache = copy_exports(embedder_exports, tmp_path / "cache")
    adapter = SentenceEmbedderAdapter.load(context(embedder_dir, cache, "auto"))
    runtime = adapter.info.runtime
    assert (runtime["backend"], runtime["precision"]) == ("torch", "fp32")
    others = {k: v for k, v in runtime["measured"].items() if k != "torch/fp32"}
    assert others and not any(v["passed"] for v in others.values())


@pytest.mark.usefixtures("mismatching")
def test_auto_cross_encoder_falls_back_to_torch(
    cross_encoder_dir: Path, cross_encoder_exports: Path, tmp_path: Path
) -> None:
    cache = copy_exports(cross_encoder_exports, tmp_path / "cache")
    adapter = CrossEncoderAdapter.load(context(cross_encoder_dir, cache, "auto", tolerance=1e-3))
    assert (adapter.info.runtime["backend"], adapter.info.runtime["precision"]) == ("torch", "fp32")


def test_int8_is_opt_in_only() -> None:
    with pytest.raises(ValueError, match="never chosen automatically"):
        vocabulary.BackendRequest(backend="auto", precision="int8")
    assert all(c.precision != "int8" for c in vocabulary.candidates(vocabulary.BackendRequest(backend="auto")))
    assert vocabulary.candidates(vocabulary.BackendRequest(backend="onnx", precision="int8")) == [
        Choice("onnx", "int8")
    ]


def test_gpu_candidates_are_torch_half_precisions() -> None:
    pool = vocabulary.candidates(vocabulary.BackendRequest(backend="auto", device="cuda"))
    assert pool == [REFERENCE, Choice("torch", "fp16"), Choice("torch", "bf16")]


# ---- the cache -------------------------------------------------------------------


def build_counter(calls: list[Path]) -> Any:
    def build(folder: Path) -> None:
        calls.append(folder)
        (folder / "model.bin").write_bytes(b"weights" * 100)

    return build


def test_cache_hit_and_miss_on_version(tmp_path: Path) -> None:
    calls: list[Path] = []
    parts = {"model": "abc", "backend": "onnx", "precision": "fp32", "versions": {"onnxruntime": "1.0"}}
    first = artifacts.ensure_artifact(tmp_path, "onnx", parts, build_counter(calls), "test")
    again = artifacts.ensure_artifact(tmp_path, "onnx", parts, build_counter(calls), "test")
    assert first == again and len(calls) == 1
    upgraded = {**parts, "versions": {"onnxruntime": "1.1"}}
    other = artifacts.ensure_artifact(tmp_path, "onnx", upgraded, build_counter(calls), "test")
    assert other != first and len(calls) == 2


def test_content_hash_changes_with_a_file(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"a" * 64)
    (folder / "config.json").write_text("{}")
    before = artifacts.content_hash(folder, tmp_path / "cache")
    assert artifacts.content_hash(folder, tmp_path / "cache") == before  # memoized, same answer
    (folder / "model.safetensors").write_bytes(b"b" * 65)
    assert artifacts.content_hash(folder, tmp_path / "cache") != before


def test_changed_weights_miss_the_cache(embedder_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    build_tiny_embedder(copy, seed=3)
    assert artifacts.content_hash(copy) == artifacts.content_hash(embedder_dir)
    build_tiny_embedder(copy, seed=4)  # other weights, same names
    assert artifacts.content_hash(copy) != artifacts.content_hash(embedder_dir)


def test_corrupted_artifact_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[Path] = []
    parts = {"model": "abc", "backend": "onnx", "precision": "fp32"}
    folder = artifacts.ensure_artifact(tmp_path, "onnx", parts, build_counter(calls), "test")
    (folder / "model.bin").write_bytes(b"truncated")
    with caplog.at_level(logging.WARNING):
        again = artifacts.ensure_artifact(tmp_path, "onnx", parts, build_counter(calls), "test")
    assert again == folder and len(calls) == 2
    assert artifacts.verify(folder)
    assert "corrupted" in caplog.text


def test_corrupted_onnx_export_is_rebuilt_on_load(embedder_dir: Path, cache_dir: Path) -> None:
    adapter = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "onnx", "fp32"))
    expected = embed(adapter, TEXTS)
    folder = fp32_embedder_export(cache_dir)
    model = folder / "model.onnx"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])  # a crash mid-write
    assert not artifacts.verify(folder)
    reloaded = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "onnx", "fp32"))
    np.testing.assert_allclose(embed(reloaded, TEXTS), expected, atol=1e-6)
    assert artifacts.verify(folder)


def fp32_embedder_export(cache: Path) -> Path:
    for manifest in cache.glob("onnx/*/manifest.json"):
        parts = json.loads(manifest.read_text())["parts"]
        if (parts["graph"], parts["precision"]) == ("sentence-embedder", "fp32"):
            return manifest.parent
    raise AssertionError("no fp32 export of the embedder in the cache")


def test_read_only_cache_falls_back_with_a_warning(
    embedder_dir: Path,
    embedder_exports: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    read_only = tmp_path / "read-only"
    real = artifacts.probe_write

    def refuse(folder: Path) -> None:
        # Tests run as root, for whom chmod 0555 still allows writes: refuse the way the kernel would.
        if Path(folder) == read_only:
            raise PermissionError(13, "Permission denied", str(folder))
        real(folder)

    fallbacks: list[Path] = []
    choose_folder = artifacts.usable_cache_dir

    def seeded(folder: Path | None) -> Path:
        # The fallback the loader chose, given the session's exports (what is tested is the
        # choice of folder; exporting into it would be the same export again).
        chosen = choose_folder(folder)
        fallbacks.append(copy_exports(embedder_exports, chosen))
        return chosen

    monkeypatch.setattr(artifacts, "probe_write", refuse)
    monkeypatch.setattr(artifacts, "usable_cache_dir", seeded)
    with caplog.at_level(logging.WARNING):
        adapter = SentenceEmbedderAdapter.load(context(embedder_dir, read_only, "onnx", "fp32"))
    assert adapter.info.runtime["backend"] == "onnx"
    assert "not writable" in caplog.text
    assert not any(read_only.rglob("model.onnx"))
    assert isinstance(adapter.runner, runners.OnnxRunner)
    assert fallbacks and all(folder != read_only for folder in fallbacks)
    assert Path(adapter.runner.session._model_path).is_relative_to(fallbacks[0])


def test_catalog_rejects_int8_off_onnx(tmp_path: Path) -> None:
    from sift_server.registry.catalog import CatalogError, load_spec

    path = tmp_path / "m.yaml"
    path.write_text(
        "name: m\nadapter: sentence-embedder\nsource: {path: /x}\ntasks: [encode]\nbackend: openvino\nprecision: int8\n"
    )
    with pytest.raises(CatalogError, match="int8"):
        load_spec(path)
    path.write_text("name: m\nadapter: sentence-embedder\nsource: {path: /x}\ntasks: [encode]\n")
    spec = load_spec(path)
    assert (spec.backend, spec.precision) == ("auto", None)


def test_backend_override() -> None:
    from sift_server.registry.loader import split_backend

    assert split_backend("openvino:fp32") == ("openvino", "fp32")
    assert split_backend("onnx") == ("onnx", None)
    assert split_backend(None) == split_backend("") == (None, None)


def test_rust_tokenizer_matches_transformers() -> None:
    from sift_server.adapters._tokenize import HfTokenizer, RustTokenizer
    from tests.fixtures.tiny_models import minilm_folder

    folder = minilm_folder()
    rust, hf = RustTokenizer(folder / "tokenizer.json"), HfTokenizer(folder)
    from sift_server.adapters._probes import PROBE_TEXTS

    texts = [*TEXTS, *PROBE_TEXTS, "word " * 300, "", "  spaces  and\ttabs\n", "ÀÉÎ naïve café 東京 🙂"]
    assert rust.pad_token_id == hf.pad_token_id
    for limit in (None, 8, 256):
        assert rust.ids(texts, limit) == hf.ids(texts, limit)


async def test_models_listing_shows_what_runs(
    embedder_dir: Path, embedder_exports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIFT_BACKEND", raising=False)  # the suite's default pins torch:fp32
    monkeypatch.setenv("SIFT_CACHE_DIR", str(embedder_exports))  # the IR exported once for the session
    entry = (
        f"adapter: sentence-embedder\nsource: {{path: {embedder_dir}}}\ntasks: [encode]\n"
        "backend: openvino\nprecision: fp32\n"
    )
    async with serving_one_entry(tmp_path, "tiny/ov", entry) as client:
        info = (await client.get("/v1/models/tiny/ov")).json()
        encoded = await client.post("/v1/encode/tiny/ov", json={"items": [{"text": "hello"}]})
    assert encoded.status_code == 200
    assert info["runtime"]["backend"] == "openvino"
    assert info["runtime"]["precision"] == "fp32"
    assert info["runtime"]["selected_by"] == "catalog"
    assert info["runtime"]["inference_num_threads"] == 1


def test_lora_needs_the_torch_backend(
    embedder_dir: Path, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vino = SentenceEmbedderAdapter.load(context(embedder_dir, cache_dir, "openvino", "fp32"))
    assert not vino.supports_lora
    with pytest.raises(NotImplementedError):
        vino.load_lora("a", tmp_path)

    from sift_server.registry import loader
    from sift_server.registry.catalog import load_spec

    path = tmp_path / "m.yaml"
    path.write_text(
        f"name: m\nadapter: sentence-embedder\nsource: {{path: {embedder_dir}}}\ntasks: [encode]\n"
        "backend: openvino\nloras: {a: {path: /nowhere}}\n"
    )
    seen: list[tuple[str, str | None]] = []

    class Recorder:
        transformers_models = False  # builds no model: the loader need not import transformers' code

        @classmethod
        def load(cls, ctx: LoadContext) -> Any:
            seen.append((ctx.backend, ctx.precision))
            return None

    monkeypatch.delenv("SIFT_BACKEND", raising=False)
    monkeypatch.setattr(loader, "adapter_class", lambda name: Recorder)
    loader.load_adapter(load_spec(path), torch_threads=1)
    assert seen == [("torch", "fp32")]
