"""SPLADE-style sparse text encoders through sentence-transformers' ``SparseEncoder``.

The model folder is a ``SparseEncoder`` save (a masked-LM transformer, then
``SpladePooling``: log(1 + ReLU(logits)) and max (or sum) over tokens, so one
weight per vocabulary entry). The library's module stack runs unchanged; only
tokenization moves to ``prepare`` (per request, unpadded: real token counts
are the batch cost) and padding to ``forward`` (once per fused batch).

Queries and documents: the model's ``query`` / ``document`` prompts (its
``config_sentence_transformers.json``) are prepended as ``encode_query`` /
``encode_document`` do, and a model with a ``Router`` module is run with
``task="query"`` or ``"document"``; then only requests of the same side fuse.
A request ``instruction`` replaces the prompt (as ``encode(prompt=...)``).

Output per item: ``("sparse", indices, values)``: the non-zero vocabulary ids
in ascending order (int32) and their weights (float32), after the model's
``max_active_dims`` cut when it sets one.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, EncodeTask, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts


class SparseVector:
    """One item's sparse output: ascending int32 ``indices`` and float32 ``values``."""

    __slots__ = ("indices", "values")

    def __init__(self, indices: np.ndarray, values: np.ndarray) -> None:
        self.indices = indices
        self.values = values


def to_sparse_vectors(dense: torch.Tensor) -> list[SparseVector]:
    """Rows of a (batch, vocab) tensor as sparse vectors (ascending indices)."""
    rows = dense.float().cpu().numpy()
    out = []
    for row in rows:
        indices = np.flatnonzero(row).astype(np.int32)
        out.append(SparseVector(indices, row[indices].astype(np.float32)))
    return out


def _vocab_size(model: Any) -> int:
    """The MLM head's width: the pooling's declared dimension, else the transformer's vocabulary."""
    for module in model.modules():
        dimension = getattr(module, "embedding_dimension", None)
        if type(module).__name__ == "SpladePooling" and isinstance(dimension, int):
            return dimension
    for module in model.modules():
        config = getattr(getattr(module, "auto_model", None), "config", None)
        if config is not None and getattr(config, "vocab_size", None):
            return int(config.vocab_size)
    return len(model.tokenizer)


class SparseEncoderAdapter(Adapter):
    def __init__(self, model: Any, max_length: int, device: torch.device) -> None:
        from sentence_transformers.base.modules import Router

        self.model = model
        self.device = device
        self.max_length = max_length
        # prepare (event loop) and forward (executor thread) must not share a
        # fast tokenizer's Rust state.
        self.tokenizer = copy.deepcopy(model.tokenizer)
        self._pad_tokenizer = model.tokenizer
        self._input_names = tuple(self.tokenizer.model_input_names)
        prompts = dict(model.prompts or {})
        self.query_prompt = str(prompts.get("query") or "")
        self.document_prompt = str(prompts.get("document") or prompts.get("passage") or prompts.get("corpus") or "")
        self.routed = any(isinstance(module, Router) for module in model.modules())
        self.max_active_dims: int | None = model.max_active_dims
        vocab = _vocab_size(model)
        self.info = AdapterInfo(
            tasks=frozenset({"encode"}),
            outputs=("sparse",),
            dims={"sparse": vocab},
            max_sequence_length=max_length,
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> SparseEncoderAdapter:
        from sentence_transformers import SparseEncoder

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        model = SparseEncoder(str(ctx.path), device=str(device), local_files_only=True)
        model.eval()
        if ctx.options.get("max_active_dims") is not None:
            model.max_active_dims = int(ctx.options["max_active_dims"])
        max_length = int(ctx.max_sequence_length or model.max_seq_length or 512)
        if model.max_seq_length:
            max_length = min(max_length, int(model.max_seq_length))
        return cls(model, max_length, device)

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, EncodeTask):
            raise InvalidInput("This model only supports encode.")
        prompt = (
            task.instruction if task.instruction else (self.query_prompt if task.is_query else self.document_prompt)
        )
        texts = [prompt + text for text in task.texts] if prompt else list(task.texts)
        truncate = task.overflow != "error"
        kwargs: dict[str, Any] = {"truncation": truncate, "verbose": False}
        if truncate:
            kwargs["max_length"] = self.max_length
        encoded = self.tokenizer(texts, **kwargs)
        if not truncate:
            for index, ids in enumerate(encoded["input_ids"]):
                if len(ids) > self.max_length:
                    raise InputTooLong(
                        f"Item {index} has {len(ids)} tokens; this model accepts at most {self.max_length} "
                        "(use overflow_policy 'truncate' to cut it).",
                        index=index,
                        tokens=len(ids),
                        max_tokens=self.max_length,
                    )
        features = [{name: encoded[name][i] for name in self._input_names} for i in range(len(texts))]
        costs = [len(ids) for ids in encoded["input_ids"]]
        side = ("query" if task.is_query else "document") if self.routed else None
        return Prepared(item_costs=costs, compat_key=side, payload=(side, features), input_tokens=sum(costs))

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        from sentence_transformers.util import select_max_active_dims

        side = parts[0].prepared.payload[0]
        features = [f for part in parts for f in part.prepared.payload[1][part.start : part.stop]]
        batch = self._pad_tokenizer.pad(features, padding=True, return_tensors="pt")
        inputs = {name: tensor.to(self.device) for name, tensor in batch.items()}
        kwargs = {"task": side} if side is not None else {}
        with torch.inference_mode():
            embeddings = self.model(inputs, **kwargs)["sentence_embedding"]
            if self.max_active_dims is not None:
                embeddings = select_max_active_dims(embeddings, max_active_dims=self.max_active_dims)
        vectors = to_sparse_vectors(embeddings)
        return split_by_parts([{"sparse": v} for v in vectors], parts)

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)
