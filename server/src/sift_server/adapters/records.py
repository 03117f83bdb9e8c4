"""What each adapter is, one record per adapter: the catalog, the registry, the
services and ``/v1/models`` read it, before (and without) importing the adapter's
module, which pulls torch and its model library.

Adding an adapter is one new module under ``adapters/`` (an :class:`Adapter`
subclass) and one :class:`AdapterRecord` in ``RECORDS`` below
(docs/architecture.md, "Adding an adapter")."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass

from sift_server.adapters.backends.request import RUNTIMES, RuntimeName
from sift_server.adapters.base import Adapter, InputKind, Task


@dataclass(frozen=True, slots=True)
class AdapterRecord:
    """One adapter as the layers above ``adapters/`` know it."""

    # The catalog's ``adapter:`` value.
    name: str
    # ``"package.module:Class"``, imported at the first load of a model of this adapter.
    target: str
    # What a catalog entry of this adapter may list under ``tasks``.
    tasks: frozenset[Task]
    # What its requests' items may carry.
    inputs: tuple[InputKind, ...] = ("text",)
    # What ``encode`` returns (``dense``, ``sparse``, ``multivector``): ``/v1/models``
    # says it before the model loads. Required with the encode task, empty without.
    encode_outputs: tuple[str, ...] = ()
    # Whether ``extract`` reads ``params.output_schema`` (structured extraction).
    structured_extract: bool = False
    # Where its forward can run. More than one: the adapter chooses through
    # ``backends.select`` and an ``auto`` entry serves on the reference while
    # ``auto`` decides; one: entries run there and nothing is decided.
    backends: frozenset[RuntimeName] = frozenset({"torch"})
    # Whether its model folder may hold no weights, or not exist: the adapter says at
    # request time what a request needs that the folder lacks (docling: office, HTML
    # and Markdown convert without weights; PDFs and images need layout and OCR models).
    weights_optional: bool = False
    # Whether an entry may pin its folder's own Python (``repository_code``) for this
    # adapter to run (adapters/repository_code.py); the others refuse ``auto_map`` folders.
    repository_code: bool = False
    # Whether its models are served by an operator's upstream (the entry's ``remote``
    # block, no ``source``): nothing is loaded but an HTTP client.
    remote: bool = False

    def __post_init__(self) -> None:
        module, _, attribute = self.target.partition(":")
        if not (self.name and module and attribute):
            raise ValueError(f"adapter record {self.name!r}: target must be 'module:Class', not {self.target!r}")
        if not self.tasks or not self.inputs or not self.backends:
            raise ValueError(f"adapter record {self.name!r}: tasks, inputs and backends must not be empty")
        if ("encode" in self.tasks) != bool(self.encode_outputs):
            raise ValueError(f"adapter record {self.name!r}: encode_outputs go with the encode task, and only with it")
        if self.structured_extract and "extract" not in self.tasks:
            raise ValueError(f"adapter record {self.name!r}: structured_extract needs the extract task")
        unknown = set(self.backends) - set(RUNTIMES)
        if unknown:
            raise ValueError(f"adapter record {self.name!r}: unknown backends {sorted(unknown)}")

    def adapter_class(self) -> type[Adapter]:
        module_name, _, attribute = self.target.partition(":")
        cls: object = getattr(importlib.import_module(module_name), attribute)
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise TypeError(f"{self.target} is not an Adapter")
        return cls


# Every runtime: the adapter builds its network as a ``backends.Graph`` and
# chooses through ``backends.select``.
_ANY_RUNTIME: frozenset[RuntimeName] = frozenset({"torch", "onnx", "openvino"})

_RECORDS: dict[str, AdapterRecord] = {
    record.name: record
    for record in (
        AdapterRecord(
            name="sentence-embedder",
            target="sift_server.adapters.sentence_embedder:SentenceEmbedderAdapter",
            tasks=frozenset({"encode"}),
            encode_outputs=("dense",),
            backends=_ANY_RUNTIME,
            repository_code=True,
        ),
        AdapterRecord(
            name="cross-encoder",
            target="sift_server.adapters.cross_encoder:CrossEncoderAdapter",
            tasks=frozenset({"score"}),
            backends=_ANY_RUNTIME,
        ),
        AdapterRecord(
            name="gliner",
            target="sift_server.adapters.gliner.adapter:GlinerAdapter",
            tasks=frozenset({"extract"}),
            backends=_ANY_RUNTIME,
        ),
        AdapterRecord(
            name="gliclass",
            target="sift_server.adapters.gliclass.adapter:GliClassAdapter",
            tasks=frozenset({"extract"}),
            backends=_ANY_RUNTIME,
        ),
        AdapterRecord(
            name="sparse-encoder",
            target="sift_server.adapters.sparse_encoder:SparseEncoderAdapter",
            tasks=frozenset({"encode"}),
            encode_outputs=("sparse",),
        ),
        AdapterRecord(
            name="colbert",
            target="sift_server.adapters.colbert:ColbertAdapter",
            tasks=frozenset({"encode", "score"}),
            encode_outputs=("multivector",),
        ),
        AdapterRecord(
            name="clip",
            target="sift_server.adapters.clip:ClipAdapter",
            tasks=frozenset({"encode"}),
            inputs=("text", "image"),
            encode_outputs=("dense",),
        ),
        AdapterRecord(
            name="colpali",
            target="sift_server.adapters.colpali:ColPaliAdapter",
            tasks=frozenset({"encode", "score"}),
            inputs=("text", "image"),
            encode_outputs=("multivector",),
        ),
        AdapterRecord(
            name="colpali-engine",
            target="sift_server.adapters.colvision:ColVisionAdapter",
            tasks=frozenset({"encode", "score"}),
            inputs=("text", "image"),
            encode_outputs=("multivector",),
        ),
        AdapterRecord(
            name="topk-embed",
            target="sift_server.adapters.topk_embed:TopkEmbedAdapter",
            tasks=frozenset({"encode", "score"}),
            inputs=("text", "image"),
            encode_outputs=("multivector",),
        ),
        AdapterRecord(
            name="qwen3-vl-embedder",
            target="sift_server.adapters.qwen3_vl_embedder:Qwen3VLEmbedderAdapter",
            tasks=frozenset({"encode"}),
            inputs=("text", "image"),
            encode_outputs=("dense",),
        ),
        AdapterRecord(
            name="qwen3-vl-reranker",
            target="sift_server.adapters.qwen3_vl_reranker:Qwen3VLRerankerAdapter",
            tasks=frozenset({"score"}),
            inputs=("text", "image"),
        ),
        AdapterRecord(
            name="nli",
            target="sift_server.adapters.nli:NliAdapter",
            tasks=frozenset({"extract"}),
            backends=_ANY_RUNTIME,
        ),
        AdapterRecord(
            name="gliner2",
            target="sift_server.adapters.gliner2_extractor:Gliner2Adapter",
            tasks=frozenset({"extract"}),
            structured_extract=True,
        ),
        AdapterRecord(
            name="gliner2-v2",
            target="sift_server.adapters.gliner2_v2:Gliner2V2Adapter",
            tasks=frozenset({"extract"}),
        ),
        AdapterRecord(
            name="glirel",
            target="sift_server.adapters.glirel:GlirelAdapter",
            tasks=frozenset({"extract"}),
        ),
        AdapterRecord(
            name="decoder-embedder",
            target="sift_server.adapters.decoder_embedder:DecoderEmbedderAdapter",
            tasks=frozenset({"encode"}),
            encode_outputs=("dense",),
            backends=_ANY_RUNTIME,
        ),
        AdapterRecord(
            name="llm-reranker",
            target="sift_server.adapters.llm_reranker:LlmRerankerAdapter",
            tasks=frozenset({"score"}),
        ),
        AdapterRecord(
            name="bge-m3",
            target="sift_server.adapters.bge_m3:BgeM3Adapter",
            tasks=frozenset({"encode", "score"}),
            encode_outputs=("dense", "sparse", "multivector"),
            backends=_ANY_RUNTIME,
        ),
        AdapterRecord(
            name="openvino-genai",
            target="sift_server.generation.adapter:GenerationAdapter",
            tasks=frozenset({"generate"}),
            backends=frozenset({"openvino"}),
        ),
        AdapterRecord(
            name="ctranslate2",
            target="sift_server.generation.ctranslate2_adapter:CTranslate2GenerationAdapter",
            tasks=frozenset({"generate"}),
        ),
        AdapterRecord(
            name="openai-remote",
            target="sift_server.generation.remote:RemoteGenerationAdapter",
            tasks=frozenset({"generate"}),
            remote=True,
        ),
        AdapterRecord(
            name="owlv2",
            target="sift_server.adapters.detection:Owlv2Adapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="grounding-dino",
            target="sift_server.adapters.detection:GroundingDinoAdapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="sam3",
            target="sift_server.adapters.sam3:Sam3Adapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="florence2",
            target="sift_server.adapters.florence2:Florence2Adapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="donut",
            target="sift_server.adapters.donut:DonutAdapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="lighton-ocr",
            target="sift_server.adapters.lighton_ocr:LightOnOcrAdapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="paddleocr-vl",
            target="sift_server.adapters.paddleocr_vl:PaddleOcrVlAdapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="glm-ocr",
            target="sift_server.adapters.glm_ocr:GlmOcrAdapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="mineru",
            target="sift_server.adapters.mineru:MinerUAdapter",
            tasks=frozenset({"extract"}),
            inputs=("image",),
        ),
        AdapterRecord(
            name="docling",
            target="sift_server.adapters.docling_converter:DoclingAdapter",
            tasks=frozenset({"extract"}),
            inputs=("document", "image"),
            weights_optional=True,
        ),
        AdapterRecord(
            name="whisper",
            target="sift_server.adapters.whisper:WhisperAdapter",
            tasks=frozenset({"transcribe"}),
            inputs=("audio",),
        ),
    )
}

RECORDS: Mapping[str, AdapterRecord] = _RECORDS


def record_of(name: str) -> AdapterRecord:
    """The record of adapter ``name`` (KeyError for an unknown name: the catalog
    refuses those at start)."""
    return _RECORDS[name]


def register(record: AdapterRecord) -> None:
    """Make an adapter outside this package known to this process's catalog (the
    bench's and the cluster tests' sleeping adapter)."""
    _RECORDS[record.name] = record
