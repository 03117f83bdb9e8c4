"""Dense text embedders in the sentence-transformers layout (transformer + pooling + normalize).

Tokenization happens per request in ``prepare`` (no padding: the real token
counts are the batch cost); ``forward`` runs the transformer on the entry's
backend (``backends``: PyTorch, ONNX Runtime or OpenVINO) over the batch's rows
in groups of similar length (``backends.buckets``: a split where the padding it
saves costs more than one more call, whose price ``backends.call_cost``
measures on the loaded runner), and pools and normalizes in numpy, the same
for every backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from sift_server.adapters._lora import LoraHost, LoraSlots
from sift_server.adapters._nomic_native import is_nomic_layout, load_native, translate_config
from sift_server.adapters._probes import BATCH, PROBE_TEXTS
from sift_server.adapters._st_layout import FolderLayout, check_common, read_json, read_layout
from sift_server.adapters._tokenize import TextTokenizer, load_tokenizer, pad_rows
from sift_server.adapters.backends import buckets, call_cost
from sift_server.adapters.backends.choice import open_runner
from sift_server.adapters.backends.runners import TorchRunner
from sift_server.adapters.backends.seam import Graph, PrepareOnly, Runner
from sift_server.adapters.backends.select import COSINE, may_run_torch, select
from sift_server.adapters.base import Adapter, AdapterInfo, EncodeTask, LoadContext, Part, Prepared, TaskInput
from sift_server.adapters.repository_code import PinnedCode
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    import torch

Pooling = Literal["mean", "cls", "max"]


ADAPTER = "sentence-embedder"


def _served_pooling(layout: FolderLayout, requested: object, pinned: PinnedCode) -> Pooling:
    """The folder's own pooling mode (refused when this adapter does not compute it, or
    when the entry asks for another); the entry's ``pooling`` only where the folder names none.
    Repository code runs only as ``pinned`` (adapters/repository_code.py)."""
    check_common(layout, ADAPTER, ("Transformer", "Pooling", "Normalize"), pinned)
    folder_mode = layout.pooling_modes[0] if layout.pooling_modes else None
    if folder_mode is not None and folder_mode not in ("mean", "cls", "max"):
        hint = "Use adapter: decoder-embedder." if folder_mode == "lasttoken" else ""
        raise layout.fail(ADAPTER, f"its pooling mode is {folder_mode!r}; this adapter pools mean, cls or max", hint)
    if requested is not None and folder_mode is not None and requested != folder_mode:
        raise layout.fail(ADAPTER, f"the entry asks for {requested!r} pooling but the model pools {folder_mode!r}")
    pooling = requested or folder_mode or "mean"
    if pooling not in ("mean", "cls", "max"):
        raise ValueError(f"pooling must be mean, cls or max, not {pooling!r}")
    if layout.is_decoder:
        raise layout.fail(
            ADAPTER,
            f"it is a decoder (causal) model ({layout.model_type or 'is_decoder'}); this adapter serves "
            "bidirectional encoders",
            "Use adapter: decoder-embedder.",
        )
    if layout.padding_side == "left":
        # Sift pads on the right: an encoder with absolute positions answers otherwise.
        raise layout.fail(ADAPTER, "its tokenizer pads on the left; this adapter pads on the right")
    return pooling  # type: ignore[return-value]


class _HiddenStates(Graph):
    """The transformer alone: (input_ids, attention_mask) -> last_hidden_state."""

    kind = "sentence-embedder"
    inputs = ("input_ids", "attention_mask")
    output = "last_hidden_state"

    def __init__(self, folder: Path, *, repository_code: bool = False, native_nomic: bool = False) -> None:
        super().__init__(folder)
        # Checked against the entry's pins before this graph is built (_served_pooling).
        self.repository_code = repository_code
        # The published Nomic layout on transformers' own class (adapters/_nomic_native.py).
        self.native_nomic = native_nomic

    def build_module(self) -> torch.nn.Module:
        import torch
        from transformers import AutoModel

        class Module(torch.nn.Module):
            def __init__(self, model: torch.nn.Module) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
                hidden: torch.Tensor = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                return hidden

        if self.native_nomic:
            return Module(load_native(self.folder))
        return Module(
            AutoModel.from_pretrained(self.folder, local_files_only=True, trust_remote_code=self.repository_code)
        )


class SentenceEmbedderAdapter(LoraHost, Adapter):
    # The tokenizer from tokenizer.json, pooling and sizes from the folder's JSON files.
    loads_runtime_without_torch = True
    loads_prepare_only = True

    def __init__(
        self,
        tokenizer: TextTokenizer,
        runner: Runner,
        *,
        hidden_size: int,
        pooling: Pooling,
        normalize: bool,
        max_length: int,
        query_prefix: str,
        document_prefix: str,
        runtime: dict[str, Any] | None = None,
        call_cost_tokens: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        # None: one call over the whole padded batch (no grouping by length).
        self.call_cost_tokens = call_cost_tokens
        self.runner = runner
        self.pooling = pooling
        self.normalize = normalize
        self.max_length = max_length
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.pad_id = tokenizer.pad_token_id
        # LoRA layers go into the PyTorch model: only a torch runner serves them
        # (the loader runs an entry with loras on torch).
        self.loras = LoraSlots(runner.base_model()) if isinstance(runner, TorchRunner) else None
        self.supports_lora = self.loras is not None
        self.info = AdapterInfo(
            tasks=frozenset({"encode"}),
            outputs=("dense",),
            dims={"dense": hidden_size},
            max_sequence_length=max_length,
            runtime=runtime or runner.describe(),
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> SentenceEmbedderAdapter:
        folder = ctx.path
        options = ctx.options
        layout = read_layout(folder)
        config = read_json(folder / "config.json")
        native_nomic = is_nomic_layout(config)
        if native_nomic:
            # Its auto_map names the publisher's code, which never runs: the config is
            # translated (or refused) for transformers' own NomicBertModel.
            translate_config(config, folder)
            layout = dataclasses.replace(layout, auto_map={})
        pooling = _served_pooling(layout, options.get("pooling"), ctx.repository_code)
        # The folder's own prompts are the defaults, as sentence-transformers' encode_query and
        # encode_document (and the reference server) apply them; the entry's prefixes win.
        query_prefix = str(options.get("query_prefix", layout.prompts.get("query", "")))
        document_prefix = str(options.get("document_prefix", layout.prompts.get("document", "")))
        if (query_prefix or document_prefix) and not layout.include_prompt:
            raise layout.fail(ADAPTER, "its pooling leaves the prompt's tokens out (include_prompt false)")
        max_length = int(ctx.max_sequence_length or layout.max_seq_length or 512)
        tokenizer = load_tokenizer(folder)
        normalize = bool(options.get("normalize", True))
        if ctx.prepare_only:
            return cls(
                tokenizer,
                PrepareOnly(),
                hidden_size=int(read_json(folder / "config.json").get("hidden_size") or 0),
                pooling=pooling,
                normalize=normalize,
                max_length=max_length,
                query_prefix=query_prefix,
                document_prefix=document_prefix,
            )
        probe_rows = tokenizer.ids(PROBE_TEXTS, max_length)
        pad_id = tokenizer.pad_token_id

        def evaluate(runner: Runner) -> np.ndarray:
            chunks = [
                _embed(runner, probe_rows[i : i + BATCH], pad_id, pooling, normalize)
                for i in range(0, len(probe_rows), BATCH)
            ]
            return np.concatenate(chunks)

        runner, runtime = select(
            ctx,
            _HiddenStates(folder, repository_code=layout.repository_code, native_nomic=native_nomic),
            evaluate,
            COSINE,
            open_runner,
            device=_device(options, ctx.backend),
            probe_key=f"{pooling}:{normalize}:{max_length}",
        )
        hidden_size = int(config.get("hidden_size") or evaluate(runner).shape[1])
        measured = call_cost.measure(_shape_runner(runner, max(probe_rows, key=len), pad_id))
        cost = buckets.CALL_COST_TOKENS if measured is None else measured
        runtime = {**runtime, "call_cost_tokens": cost}
        return cls(
            tokenizer,
            runner,
            hidden_size=hidden_size,
            pooling=pooling,
            normalize=normalize,
            max_length=max_length,
            query_prefix=query_prefix,
            document_prefix=document_prefix,
            runtime=runtime,
            call_cost_tokens=cost,
        )

    # ---- prepare (event loop) -------------------------------------------

    def _texts(self, task: EncodeTask) -> list[str]:
        prefix = self.query_prefix if task.is_query else self.document_prefix
        if task.instruction:
            prefix = f"{task.instruction.rstrip()} {prefix}".rstrip() + " "
        return [prefix + text for text in task.texts] if prefix else list(task.texts)

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, EncodeTask):
            raise InvalidInput("This model only supports encode.")
        texts = self._texts(task)
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
        return Prepared(item_costs=costs, compat_key=None, payload=ids, input_tokens=sum(costs))

    # ---- forward (executor thread) --------------------------------------

    def _forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        rows: list[list[int]] = []
        for part in parts:
            rows.extend(part.prepared.payload[part.start : part.stop])
        vectors = _embed(self.runner, rows, self.pad_id, self.pooling, self.normalize, self.call_cost_tokens)
        return split_by_parts(list(vectors), parts)

    def memory_bytes(self) -> int:
        return self.runner.memory_bytes()

    def close(self) -> None:
        self.runner.close()


def _device(options: Any, backend: str) -> str:
    """The catalog's ``device`` option; else the GPU for torch and auto when there is one."""
    name = options.get("device")
    if name is not None:
        return str(name)
    # Without an NVIDIA device node there is no CUDA: do not pay for importing torch to learn it.
    if may_run_torch(backend) and any(Path("/dev").glob("nvidia[0-9]*")):
        import torch

        if torch.cuda.is_available():  # untested here: no GPU in development
            return "cuda"
    return "cpu"


def _shape_runner(runner: Runner, row: Sequence[int], pad_id: int) -> Callable[[int, int], object]:
    """``run(rows, length)``: one runner call on ``rows`` copies of ``row``
    repeated or cut to ``length`` tokens (what ``call_cost.measure`` times)."""

    def run(rows: int, length: int) -> object:
        tiled = (list(row) * (length // max(len(row), 1) + 1))[:length]
        input_ids, mask = pad_rows([tiled] * rows, pad_id)
        return runner({"input_ids": input_ids, "attention_mask": mask})

    return run


def _embed(
    runner: Runner,
    rows: Sequence[Sequence[int]],
    pad_id: int,
    pooling: str,
    normalize: bool,
    call_cost_tokens: int | None = None,
) -> np.ndarray:
    """Pad ``rows``, run the transformer (in groups of similar length when
    ``call_cost_tokens`` is given), pool and (maybe) L2-normalize: float32 (n, hidden).
    A row's vector does not depend on its group: padded positions are masked
    out of attention and pooling."""
    input_ids, mask = pad_rows(rows, pad_id)
    feed = {"input_ids": input_ids, "attention_mask": mask}

    def pooled(part: Mapping[str, np.ndarray]) -> np.ndarray:
        return _pool(runner(part), part["attention_mask"], pooling)

    if call_cost_tokens is None:
        vectors = pooled(feed)
    else:
        vectors = buckets.run_grouped(pooled, feed, "attention_mask", tuple(feed), call_cost_tokens)
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, 1e-12)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _pool(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """(rows, tokens, hidden) states to (rows, hidden) vectors over the masked tokens."""
    hidden = hidden.astype(np.float32, copy=False)
    if pooling == "cls":
        pooled = hidden[:, 0]
    elif pooling == "max":
        pooled = np.where(mask[:, :, None] == 0, -np.inf, hidden).max(axis=1)
    else:
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return pooled
