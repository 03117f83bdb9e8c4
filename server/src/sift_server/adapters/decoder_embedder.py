"""Dense embedders built on decoder (causal) language models: Qwen3-Embedding,
gte-Qwen2 and their kind, in the sentence-transformers layout with
``pooling_mode_lasttoken``.

The vector of a text is the final hidden state of its last token (the tokenizer
appends an end token where the model's own does), read from a batch padded on
the left, as sentence-transformers and the model cards do; then, per request,
Matryoshka truncation (``options.dimensions``, from the entry's
``matryoshka_min_dim`` to the full width) and L2 normalization (``options.normalize``, the entry's
default, else whether the folder ends in a Normalize module).

Queries are formatted as the reference server formats them (``_instructions``):
the entry's ``query_template`` (for Qwen3-Embedding ``Instruct: {instruction}\\nQuery:{text}``)
with the request's instruction, else the entry's ``default_instruction``.
Without a template in the entry, the folder's own query and document prompts are
the prefixes, as sentence-transformers' ``encode_query``/``encode_document`` use them.
With ``append_eos`` (the Mistral-family entries: Linq-Embed-Mistral, SFR-Embedding,
e5-mistral), the tokenizer's end-of-sequence token is appended to every formatted text
that is not blank, as the reference server does for them, so the last token pooled is
the one those models were trained to summarize into.

The network (transformers' ``AutoModel``, cut to the last position's state) runs on
the entry's backend (``backends``: PyTorch, ONNX Runtime or OpenVINO); ``auto`` keeps
a backend only when its probe vectors are within the entry's cosine tolerance of
PyTorch fp32's. Truncation and normalization run in numpy, the same for every backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._instructions import Templates, check_template, model_inputs
from sift_server.adapters._probes import BATCH, PROBE_TEXTS
from sift_server.adapters._st_layout import FolderLayout, check_common, read_json, read_layout
from sift_server.adapters._tokenize import TextTokenizer, load_tokenizer
from sift_server.adapters.backends.choice import open_runner
from sift_server.adapters.backends.seam import Graph, Runner
from sift_server.adapters.backends.select import COSINE, select
from sift_server.adapters.base import Adapter, AdapterInfo, EncodeTask, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    import torch

ADAPTER = "decoder-embedder"


class _LastTokenState(Graph):
    """The decoder alone: (input_ids, attention_mask), padded on the left -> the last position's state."""

    kind = "decoder-embedder"
    inputs = ("input_ids", "attention_mask")
    output = "last_token_state"

    def build_module(self) -> torch.nn.Module:
        import torch
        from transformers import AutoModel

        class Module(torch.nn.Module):
            def __init__(self, model: torch.nn.Module) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
                hidden: torch.Tensor = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                return hidden[:, -1]

        return Module(AutoModel.from_pretrained(self.folder, local_files_only=True))


@dataclass(frozen=True, slots=True)
class _Rows:
    """A prepared request: its token rows and how its vectors are finished."""

    ids: list[list[int]]
    normalize: bool
    dimensions: int


def pad_left(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows padded on the left to the longest, and their attention mask (int64)."""
    width = max(len(row) for row in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = row
            mask[i, width - len(row) :] = 1
    return ids, mask


def finish(vectors: np.ndarray, dimensions: int, normalize: bool) -> np.ndarray:
    """Matryoshka truncation, then L2 normalization (sentence-transformers' order with
    ``truncate_dim`` and ``normalize_embeddings``)."""
    cut = vectors[:, :dimensions].astype(np.float32, copy=False)
    if normalize:
        cut = cut / np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(cut, dtype=np.float32)


# Bidirectional decoder embedders (gte-Qwen2, stella 1.5B, GritLM) are not served: each runs its
# repository's modeling file at the reference (no genuine answer to check a stock-class forward
# against exists offline), so the reason is named before the generic repository-code one.
BIDIRECTIONAL = (
    "its config.json sets is_causal false: the model attends bidirectionally, which gte-Qwen2 and stella "
    "compute in their repository's modeling file (GritLM in its own, under a forward flag); this adapter "
    "computes causal attention and has no genuine reference to show a bidirectional forward equal to the "
    "model's recipe"
)


def check_folder(layout: FolderLayout) -> None:
    if read_json(layout.folder / "config.json").get("is_causal") is False:
        raise layout.fail(ADAPTER, BIDIRECTIONAL)
    check_common(layout, ADAPTER, ("Transformer", "Pooling", "Normalize"))
    if layout.pooling_modes and layout.pooling_modes != ("lasttoken",):
        raise layout.fail(
            ADAPTER,
            f"its pooling mode is {layout.pooling_modes[0]!r}; this adapter pools the last token",
            "Use adapter: sentence-embedder.",
        )
    if not layout.is_decoder:
        raise layout.fail(ADAPTER, f"{layout.model_type or 'the model'} is not a decoder (causal) model")
    if not layout.include_prompt:
        raise layout.fail(ADAPTER, "its pooling leaves the prompt's tokens out (include_prompt false)")


class DecoderEmbedderAdapter(Adapter):
    def __init__(
        self,
        tokenizer: TextTokenizer,
        runner: Runner,
        *,
        hidden_size: int,
        max_length: int,
        templates: Templates,
        normalize: bool,
        matryoshka_min_dim: int | None,
        runtime: Mapping[str, Any],
        eos_suffix: str = "",
    ) -> None:
        self.tokenizer = tokenizer
        self.runner = runner
        self.pad_id = tokenizer.pad_token_id
        self.hidden_size = hidden_size
        self.max_length = max_length
        self.templates = templates
        self.normalize = normalize
        self.matryoshka_min_dim = matryoshka_min_dim
        self.eos_suffix = eos_suffix
        self.info = AdapterInfo(
            tasks=frozenset({"encode"}),
            outputs=("dense",),
            dims={"dense": hidden_size},
            max_sequence_length=max_length,
            runtime=runtime,
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> DecoderEmbedderAdapter:
        folder, options = ctx.path, ctx.options
        layout = read_layout(folder)
        check_folder(layout)
        templates = _entry_templates(options, layout)
        hidden = layout.hidden_size
        if hidden is None:
            raise layout.fail(ADAPTER, "config.json names no hidden_size")
        min_dim = _matryoshka_min_dim(options.get("matryoshka_min_dim"), hidden)
        normalize = options.get("normalize")
        if normalize is None:
            normalize = "Normalize" in layout.modules
        max_length = int(ctx.max_sequence_length or layout.max_seq_length or 512)
        tokenizer = load_tokenizer(folder)
        append_eos = options.get("append_eos", False)
        if not isinstance(append_eos, bool):
            raise ValueError("append_eos must be true or false")
        eos_suffix = _eos_token(folder, layout) if append_eos else ""
        probe_rows = tokenizer.ids(PROBE_TEXTS, max_length)

        def evaluate(runner: Runner) -> np.ndarray:
            chunks = [
                _states(runner, probe_rows[i : i + BATCH], tokenizer.pad_token_id)
                for i in range(0, len(probe_rows), BATCH)
            ]
            return finish(np.concatenate(chunks), hidden, True)

        runner, runtime = select(
            ctx,
            _LastTokenState(folder),
            evaluate,
            COSINE,
            open_runner,
            device=_device(options, ctx.backend),
            probe_key=f"last:{max_length}",
        )
        return cls(
            tokenizer,
            runner,
            hidden_size=hidden,
            max_length=max_length,
            templates=templates,
            normalize=bool(normalize),
            matryoshka_min_dim=min_dim,
            runtime=runtime,
            eos_suffix=eos_suffix,
        )

    # ---- prepare (event loop) -------------------------------------------

    def _dimensions(self, options: Mapping[str, Any]) -> int:
        value = options.get("dimensions")
        if value is None or value == self.hidden_size:
            return self.hidden_size
        low = self.matryoshka_min_dim
        if isinstance(value, bool) or not isinstance(value, int) or low is None or not low <= value <= self.hidden_size:
            allowed = f"from {low} to {self.hidden_size}" if low is not None else f"{self.hidden_size} (no Matryoshka)"
            raise InvalidInput(f"Option 'dimensions' must be {allowed} for this model, not {value!r}.")
        return value

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, EncodeTask):
            raise InvalidInput("This model only supports encode.")
        options = task.options
        normalize = options.get("normalize", self.normalize)
        if not isinstance(normalize, bool):
            raise InvalidInput("Option 'normalize' must be true or false.")
        dimensions = self._dimensions(options)
        templates = self.templates.overridden(options)
        texts = model_inputs(task.texts, is_query=task.is_query, instruction=task.instruction, templates=templates)
        if self.eos_suffix:
            texts = [text + self.eos_suffix if text.strip() else text for text in texts]
        if task.overflow == "error":
            ids = self.tokenizer.ids(texts, None)
            for index, row in enumerate(ids):
                if len(row) > self.max_length:
                    raise InputTooLong(
                        f"Item {index} has {len(row)} tokens; this model accepts at most {self.max_length} "
                        "(use overflow_policy 'truncate' to cut it)."
                    )
        else:
            ids = self.tokenizer.ids(texts, self.max_length)
        costs = [len(row) for row in ids]
        return Prepared(
            item_costs=costs,
            compat_key=None,
            payload=_Rows(ids, normalize, dimensions),
            input_tokens=sum(costs),
        )

    # ---- forward (executor thread) --------------------------------------

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        rows = [row for part in parts for row in part.prepared.payload.ids[part.start : part.stop]]
        states = _states(self.runner, rows, self.pad_id)
        vectors: list[np.ndarray] = []
        offset = 0
        for part in parts:
            payload: _Rows = part.prepared.payload
            size = part.stop - part.start
            vectors.extend(finish(states[offset : offset + size], payload.dimensions, payload.normalize))
            offset += size
        return split_by_parts(vectors, parts)

    def memory_bytes(self) -> int:
        return self.runner.memory_bytes()

    def close(self) -> None:
        self.runner.close()


def _states(runner: Runner, rows: Sequence[Sequence[int]], pad_id: int) -> np.ndarray:
    input_ids, mask = pad_left(rows, pad_id)
    return runner({"input_ids": input_ids, "attention_mask": mask}).astype(np.float32, copy=False)


def _entry_templates(options: Mapping[str, Any], layout: FolderLayout) -> Templates:
    """The entry's templates; without them the folder's prompts as prefixes."""
    query = options.get("query_template")
    document = options.get("doc_template")
    if query is None and layout.prompts.get("query"):
        query = layout.prompts["query"].replace("{", "{{").replace("}", "}}") + "{text}"
    if document is None and layout.prompts.get("document"):
        document = layout.prompts["document"].replace("{", "{{").replace("}", "}}") + "{text}"
    for value, where in ((query, "query_template"), (document, "doc_template")):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{where} must be a string")
        check_template(value, where)
    default = options.get("default_instruction")
    return Templates(query=query, document=document, default_instruction=None if default is None else str(default))


def _eos_token(folder: Path, layout: FolderLayout) -> str:
    """The tokenizer's end-of-sequence token, as text (``tokenizer_config.json``, else
    ``special_tokens_map.json``)."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        value = read_json(folder / name).get("eos_token")
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and value:
            return value
    raise layout.fail(ADAPTER, "append_eos is set but the tokenizer names no eos_token")


def _matryoshka_min_dim(value: Any, hidden: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= hidden:
        raise ValueError(f"matryoshka_min_dim must be a width from 1 to the model's {hidden}")
    return value


def _device(options: Mapping[str, Any], backend: str) -> str:
    """The entry's ``device`` option; else the GPU for torch and auto when there is one."""
    name = options.get("device")
    if name is not None:
        return str(name)
    # Without an NVIDIA device node there is no CUDA: do not pay for importing torch to learn it.
    if backend in ("auto", "torch") and any(Path("/dev").glob("nvidia[0-9]*")):
        import torch

        if torch.cuda.is_available():  # untested here: no GPU in development
            return "cuda"
    return "cpu"
