"""One record per adapter (adapters/records.py): the catalog checks entries against
it, the loader plans the backend from it (backends.plan_load), and a record that
contradicts itself is refused where it is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from sift_server.adapters.backends.request import REFERENCE
from sift_server.adapters.backends.select import plan_load
from sift_server.adapters.records import RECORDS, AdapterRecord, record_of
from sift_server.registry.catalog import Catalog, CatalogError

ANY = frozenset({"torch", "onnx", "openvino"})


def catalog_with(tmp_path: Path, adapter: str, tasks: str, extra: str = "") -> Catalog:
    weights = tmp_path / "weights"
    weights.mkdir(exist_ok=True)
    (weights / "model.safetensors").write_bytes(b"\0")
    folder = tmp_path / "cat"
    folder.mkdir(exist_ok=True)
    (folder / "m.yaml").write_text(
        f"name: m\nadapter: {adapter}\nsource: {{path: {weights}}}\ntasks: [{tasks}]\n{extra}"
    )
    return Catalog.from_dirs([folder], include_shipped=False)


def test_every_record_names_a_class_that_is_an_adapter() -> None:
    # Imports each adapter module: the records' targets are not left to the first load to check.
    for name, record in RECORDS.items():
        assert record.name == name
        assert record.adapter_class().__name__ == record.target.rpartition(":")[2]


def test_an_entry_may_list_only_tasks_its_adapter_serves(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="adapter cross-encoder serves score, not encode"):
        catalog_with(tmp_path, "cross-encoder", "encode")
    assert catalog_with(tmp_path, "colbert", "encode, score").get("m").tasks == ["encode", "score"]


def test_a_named_backend_must_be_one_the_adapter_runs_on(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="adapter clip runs on torch, not onnx"):
        catalog_with(tmp_path, "clip", "encode", "backend: onnx\n")
    assert catalog_with(tmp_path, "clip", "encode", "backend: torch\n").get("m").backend == "torch"
    assert catalog_with(tmp_path, "gliner", "extract", "backend: openvino\n").get("m").backend == "openvino"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("backend: torch\nprecision: int8\n", "backend torch does not run precision int8"),
        ("precision: int8\n", "int8 is never chosen automatically"),
        ("backend: openvino\nprecision: fp16\n", "backend openvino does not run precision fp16"),
    ],
)
def test_backend_and_precision_follow_the_one_vocabulary(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        catalog_with(tmp_path, "sentence-embedder", "encode", extra)


def test_records_refuse_contradictions() -> None:
    target = "sift_server.adapters.clip:ClipAdapter"
    with pytest.raises(ValueError, match="encode_outputs"):
        AdapterRecord(name="x", target=target, tasks=frozenset({"encode"}))
    with pytest.raises(ValueError, match="encode_outputs"):
        AdapterRecord(name="x", target=target, tasks=frozenset({"score"}), encode_outputs=("dense",))
    with pytest.raises(ValueError, match="structured_extract"):
        AdapterRecord(name="x", target=target, tasks=frozenset({"score"}), structured_extract=True)
    with pytest.raises(ValueError, match="module:Class"):
        AdapterRecord(name="x", target="no_class_here", tasks=frozenset({"score"}))
    with pytest.raises(ValueError, match="unknown backends"):
        AdapterRecord(name="x", target=target, tasks=frozenset({"score"}), backends=frozenset({"tpu"}))  # type: ignore[arg-type]


def test_an_auto_entry_that_can_run_elsewhere_serves_on_the_reference_first() -> None:
    plan = plan_load("auto", None, override=(None, None), loras=False, runs_on=ANY)
    assert (plan.backend, plan.precision, plan.first, plan.note) == ("auto", None, REFERENCE, None)


@pytest.mark.parametrize(
    ("backend", "override", "loras", "runs_on", "expected"),
    [
        # Named in the entry: loaded once, as named.
        ("onnx", (None, None), False, ANY, ("onnx", None)),
        # The override replaces the entry and is loaded at once (the bench's backend arms).
        ("auto", ("openvino", "bf16"), False, ANY, ("openvino", "bf16")),
        ("auto", ("auto", None), False, ANY, ("auto", None)),
        # One runtime: nothing to decide.
        ("auto", (None, None), False, frozenset({"torch"}), ("auto", None)),
        # LoRA layers live in the PyTorch model.
        ("auto", (None, None), True, ANY, ("torch", "fp32")),
        ("onnx", ("openvino", None), True, ANY, ("torch", "fp32")),
    ],
)
def test_loads_with_nothing_to_decide_in_the_background(
    backend: str,
    override: tuple[str | None, str | None],
    loras: bool,
    runs_on: frozenset[str],
    expected: tuple[str, str | None],
) -> None:
    plan = plan_load(backend, None, override=override, loras=loras, runs_on=runs_on)
    assert (plan.backend, plan.precision) == expected
    assert plan.first is None
    assert (plan.note is not None) == loras


def test_the_records_say_what_used_to_be_five_tables() -> None:
    assert [n for n, r in RECORDS.items() if r.structured_extract] == ["gliner2"]
    assert record_of("clip").inputs == ("text", "image")
    assert {n: r.encode_outputs for n, r in RECORDS.items() if r.encode_outputs} == {
        "sentence-embedder": ("dense",),
        "sparse-encoder": ("sparse",),
        "colbert": ("multivector",),
        "clip": ("dense",),
        "decoder-embedder": ("dense",),
        "bge-m3": ("dense", "sparse", "multivector"),
        "colpali": ("multivector",),
        "colpali-engine": ("multivector",),
        "topk-embed": ("multivector",),
        "qwen3-vl-embedder": ("dense",),
    }
    assert [n for n, r in RECORDS.items() if r.remote] == ["openai-remote"]  # no forward: its backend is moot
    assert {n for n, r in RECORDS.items() if r.backends == {"torch"} and not r.remote} == {
        "clip",
        "gliner2",
        "colbert",
        "sparse-encoder",
        "llm-reranker",
        "docling",
        "whisper",
        "owlv2",
        "grounding-dino",
        "sam3",
        "florence2",
        "donut",
        "lighton-ocr",
        "paddleocr-vl",
        "glm-ocr",
        "mineru",
        "glirel",
        "colpali",
        "gliner2-v2",
        "colpali-engine",
        "topk-embed",
        "qwen3-vl-embedder",
        "qwen3-vl-reranker",
        "ctranslate2",  # CTranslate2 runs it; nothing to decide
    }
    assert record_of("owlv2").inputs == record_of("grounding-dino").inputs == record_of("sam3").inputs == ("image",)
    assert record_of("florence2").inputs == record_of("donut").inputs == ("image",)
    assert record_of("lighton-ocr").inputs == record_of("paddleocr-vl").inputs == ("image",)
    assert record_of("glm-ocr").inputs == record_of("mineru").inputs == ("image",)


@pytest.mark.parametrize(
    ("adapter", "tasks", "inputs", "outputs"),
    [
        ("clip", ["encode"], ["text", "image"], ["dense"]),
        ("colbert", ["encode", "score"], ["text"], ["multivector", "score"]),
        ("sparse-encoder", ["encode"], ["text"], ["sparse"]),
        ("gliner2", ["extract"], ["text"], ["json"]),
        ("bge-m3", ["encode", "score"], ["text"], ["dense", "sparse", "multivector", "score"]),
        ("whisper", ["transcribe"], ["audio"], ["text"]),
        ("owlv2", ["extract"], ["image"], ["json"]),
        ("sam3", ["extract"], ["image"], ["json"]),
        ("colpali", ["encode", "score"], ["text", "image"], ["multivector", "score"]),
        ("qwen3-vl-embedder", ["encode"], ["text", "image"], ["dense"]),
        ("qwen3-vl-reranker", ["score"], ["text", "image"], ["score"]),
    ],
)
def test_a_cold_model_is_described_from_its_record(
    adapter: str, tasks: list[str], inputs: list[str], outputs: list[str]
) -> None:
    from sift_server.api.models import model_info
    from sift_server.registry.catalog import ModelSpec
    from sift_server.registry.registry import ModelRecord

    spec = ModelSpec.model_validate({"name": "m", "adapter": adapter, "source": {"hf": "m"}, "tasks": tasks})
    info = model_info(ModelRecord(spec), "0" * 64)
    assert (info["loaded"], info["inputs"], info["outputs"]) == (False, inputs, outputs)
