"""The adapter contract between the engine and model code.

What a forward takes and returns (``Prepared``, ``Part``) belongs to neither
side: it lives in ``sift_server.forward_io`` and is re-exported here for the
adapters, so the engine never imports the model layer."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sift_server.adapters.document_input import Document
from sift_server.forward_io import Part, Prepared

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = [
    "Adapter",
    "AdapterInfo",
    "ClassificationType",
    "EncodeTask",
    "ExtractTask",
    "FewShotExample",
    "InputKind",
    "LoadContext",
    "OverflowPolicy",
    "Part",
    "Prepared",
    "ScoreTask",
    "Task",
    "TaskInput",
    "TranscribeTask",
]

# The tasks and input kinds a model can have: one definition, read by the catalog,
# the adapter records (adapters/records.py) and /v1/models. A new one is added here.
Task = Literal["encode", "score", "extract", "generate", "transcribe"]
InputKind = Literal["text", "image", "document", "audio"]
OverflowPolicy = Literal["truncate", "error"]
ClassificationType = Literal["single-label", "multi-label"]


@dataclass(frozen=True, slots=True)
class EncodeTask:
    texts: Sequence[str]
    is_query: bool = False
    instruction: str | None = None
    overflow: OverflowPolicy = "truncate"
    options: Mapping[str, Any] = field(default_factory=dict)
    # Per item, its images decoded to RGB (empty: a text item); only for models
    # whose ``AdapterInfo.inputs`` has "image". An item with images is encoded
    # as its images, its text ignored.
    images: Sequence[Sequence[Image]] = ()
    # The outputs the request asked for (the service checked them against
    # ``AdapterInfo.outputs``); empty: every output. An adapter with several may
    # compute only these (BGE-M3); the service answers only these either way.
    output_types: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class ScoreTask:
    query: str
    texts: Sequence[str]
    instruction: str | None = None
    overflow: OverflowPolicy = "truncate"
    options: Mapping[str, Any] = field(default_factory=dict)
    # Per candidate, its images decoded to RGB (empty: a text candidate); only for
    # models whose ``AdapterInfo.inputs`` has "image" (the query is always text).
    images: Sequence[Sequence[Image]] = ()


@dataclass(frozen=True, slots=True)
class FewShotExample:
    """One few-shot example of a classifier request: a text and its labels."""

    text: str
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ExtractTask:
    """An extract request with its options already validated and typed (the
    service layer does that once); ``None`` means "not set by the request", so
    the adapter applies its catalog default."""

    texts: Sequence[str]
    labels: Sequence[str]
    threshold: float | None = None
    multi_label: bool | None = None
    instruction: str | None = None
    overflow: OverflowPolicy = "truncate"
    options: Mapping[str, Any] = field(default_factory=dict)
    # GLiNER: resolve overlapping spans (True) or keep nested ones.
    flat_ner: bool | None = None
    # GLiClass: softmax over the labels or a sigmoid per label.
    classification_type: ClassificationType | None = None
    # GLiClass: named label sets scored separately, instead of ``labels``.
    label_groups: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    # GLiClass: few-shot examples rendered into the input as the pipeline does.
    examples: tuple[FewShotExample, ...] = ()
    # GLiNER2: a JSON schema of the object to read from each text, instead of labels.
    output_schema: Mapping[str, Any] | None = None
    # Document models: the items' documents, checked and counted (service/documents.py).
    documents: Sequence[Document] = ()
    # Image models (records with "image" in ``inputs``): per item, its images decoded
    # to RGB in the prep thread (service/images.py).
    images: Sequence[Sequence[Image]] = ()
    # Each item's ``metadata`` as sent (GLiREL reads its entities there); empty when none were read.
    metadata: Sequence[Mapping[str, Any] | None] = ()


@dataclass(frozen=True, slots=True)
class TranscribeTask:
    """One audio file to transcribe. ``audio`` is the encoded file as sent; the
    service's deferred decode (in the prep thread) fills ``samples``: mono float32
    at the model's sampling rate, before ``prepare`` reads them."""

    audio: bytes
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    # Segments with start and end times (verbose_json, srt, vtt) rather than text alone.
    timestamps: bool = False
    samples: Any = None  # numpy float32 array once decoded
    sampling_rate: int = 16_000


TaskInput = EncodeTask | ScoreTask | ExtractTask | TranscribeTask


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    tasks: frozenset[Task]
    inputs: tuple[str, ...] = ("text",)
    outputs: tuple[str, ...] = ()
    dims: Mapping[str, int] = field(default_factory=dict)
    max_sequence_length: int = 512
    # What runs the forward (backend, precision, how it was chosen), for /v1/models.
    runtime: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LoadContext:
    """What an adapter needs to load: a resolved local folder and its options.

    ``backend``/``precision``/``tolerance`` come from the catalog entry (see
    ``adapters/backends/``); a bare context runs PyTorch fp32 without
    probing (tests load their references that way), the catalog's default is
    ``auto``; a ``precision`` of None leaves the precision to choose. ``torch_threads`` is the thread count of
    every backend, not only PyTorch's. ``rechoose_backend``: ``auto`` decides again instead of
    reusing its recorded decision (``SIFT_RECHOOSE_BACKEND``); ``recorded_only``: open the
    recorded decision of an ``auto`` entry, never export or time (the serving
    process; the decision itself runs in a child, ``registry.deciding``)."""

    path: Path
    options: Mapping[str, Any]
    max_sequence_length: int | None
    torch_threads: int
    backend: str = "torch"
    precision: str | None = "fp32"
    tolerance: float | None = None
    cache_dir: Path | None = None
    rechoose_backend: bool = False
    # Open ``auto``'s recorded decision or raise ``backends.NotDecided``; never decide here.
    recorded_only: bool = False
    # The entry's pinned repository code (file -> SHA-256; adapters/repository_code.py):
    # empty, the folder's own Python is never run.
    repository_code: Mapping[str, str] = field(default_factory=dict)
    # A remote entry's upstream (the catalog's ``remote`` block, as plain values); None for local weights.
    remote: Mapping[str, Any] | None = None
    # Load what ``prepare`` needs and no network (a front-end of ``sift serve --frontends``);
    # only adapters whose ``loads_prepare_only`` is True are asked.
    prepare_only: bool = False


class Adapter(abc.ABC):
    """One loaded model. ``prepare`` runs on the event loop (keep it cheap);
    ``forward`` runs in the model's executor thread, one at a time."""

    info: AdapterInfo
    # Whether ``load`` builds transformers models on PyTorch: the loader then imports their code
    # first, without scikit-learn and SciPy (adapters/_lean_imports.py). An adapter that never
    # touches transformers says False and starts without torch or transformers imported.
    transformers_models: ClassVar[bool] = True
    # Whether ``load`` on a recorded ONNX Runtime or OpenVINO choice reads the model folder
    # without importing PyTorch or transformers (the loader then leaves their import to
    # the load that needs them; otherwise it imports them lean first, as above).
    loads_runtime_without_torch: ClassVar[bool] = False
    # Whether ``load`` honours ``LoadContext.prepare_only``: an adapter that only prepares
    # (tokenizer, sizes), whose ``forward`` is never called (sift_server/frontend).
    loads_prepare_only: ClassVar[bool] = False

    @classmethod
    @abc.abstractmethod
    def load(cls, ctx: LoadContext) -> Adapter: ...

    @abc.abstractmethod
    def prepare(self, task: TaskInput) -> Prepared:
        """Tokenize one request; raise ``InvalidInput``/``InputTooLong`` on bad input."""

    @abc.abstractmethod
    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        """Run one batch; return, per part, one output per item of that part."""

    def memory_bytes(self) -> int:
        """Bytes held by weights and buffers (for the registry's budget)."""
        return 0

    # ---- LoRA (adapters that support it override these) -----------------

    supports_lora: bool = False

    def load_lora(self, name: str, path: Path) -> None:
        """Load LoRA ``name`` from ``path`` (runs in a thread, not the event loop)."""
        raise NotImplementedError(f"{type(self).__name__} does not support LoRA adapters")

    def unload_lora(self, name: str) -> None:
        """Drop LoRA ``name`` (least recently used beyond the model's limit)."""
        raise NotImplementedError(f"{type(self).__name__} does not support LoRA adapters")

    def close(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing to release
        """Release what the adapter holds (called on eviction)."""
