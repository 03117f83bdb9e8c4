"""Cross-encoder reranker: one relevance score per (query, text) pair.

Loads a Hugging Face sequence-classification checkpoint (BERT-style rerankers
such as ``cross-encoder/ms-marco-*`` or ``BAAI/bge-reranker-*``) with plain
transformers. ``prepare`` tokenizes pairs without padding so costs are real
token counts; ``forward`` pads the fused batch once and runs the model.

Score scale: the raw logit (what ``sentence_transformers.CrossEncoder.predict``
returns with ``activation_fn=Identity``). With ``num_labels > 1`` the last
class's logit is the score, because two-class rerankers order their classes
(irrelevant, relevant). The catalog option ``activation: sigmoid`` maps scores
to 0..1 instead, which equals ``CrossEncoder``'s default for one-label models.
The request ``instruction`` is ignored: BERT-style cross-encoders have no
instruction slot.

The network runs on the entry's backend (``backends``: PyTorch, ONNX Runtime or
OpenVINO); ``auto`` keeps a backend only when its scores on the probe pairs are
within the entry's tolerance of PyTorch fp32's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sift_server.adapters._lora import LoraHost, LoraSlots
from sift_server.adapters._probes import BATCH, PROBE_QUERY, PROBE_TEXTS
from sift_server.adapters._torch_runtime import select_device, tokenizer_limit
from sift_server.adapters.backends.choice import open_runner
from sift_server.adapters.backends.runners import TorchRunner
from sift_server.adapters.backends.seam import Graph, PrepareOnly, Runner
from sift_server.adapters.backends.select import SCORES, may_run_torch, select
from sift_server.adapters.base import (
    Adapter,
    AdapterInfo,
    LoadContext,
    Part,
    Prepared,
    ScoreTask,
    TaskInput,
)
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

# Every score request may fuse with every other: pairs are independent.
SCORE_COMPAT_KEY = "score"
ACTIVATIONS = ("identity", "sigmoid")


class ClassifierLogits(Graph):
    """The classifier: the tokenizer's inputs (in its order) -> logits."""

    kind = "cross-encoder"
    output = "logits"

    def __init__(self, folder: Path, inputs: tuple[str, ...]) -> None:
        super().__init__(folder)
        self.inputs = inputs

    def build_module(self) -> torch.nn.Module:
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(self.folder, local_files_only=True)
        return _ByPosition(model, self.inputs)


class _ByPosition(torch.nn.Module):
    """Positional inputs (what export and the runners pass) to the model's keywords."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(**dict(zip(self.names, tensors, strict=True))).logits
        return logits


class CrossEncoderAdapter(LoraHost, Adapter):
    """Scores (query, text) pairs with an ``AutoModelForSequenceClassification``."""

    loads_prepare_only = True

    def __init__(
        self,
        runner: Runner,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int,
        activation: str,
        runtime: dict[str, Any] | None = None,
    ) -> None:
        self.runner = runner
        # LoRA layers go into the PyTorch model: only a torch runner serves them
        # (the loader runs an entry with loras on torch).
        self.loras = LoraSlots(runner.base_model()) if isinstance(runner, TorchRunner) else None
        self.supports_lora = self.loras is not None
        # prepare runs on the event loop while forward runs in the executor
        # thread; a fast tokenizer's Rust state is not safe to share between
        # concurrent calls, so each side owns its own instance.
        self.tokenizer = tokenizer
        self._pad_tokenizer = copy.deepcopy(tokenizer)
        self.max_length = max_length
        self.activation = activation
        self._input_names = tuple(tokenizer.model_input_names)
        self._pair_specials = tokenizer.num_special_tokens_to_add(pair=True)
        self.info = AdapterInfo(
            tasks=frozenset({"score"}),
            inputs=("text",),
            outputs=("score",),
            max_sequence_length=max_length,
            runtime=runtime or runner.describe(),
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> CrossEncoderAdapter:
        from transformers import AutoConfig, AutoTokenizer

        activation = str(ctx.options.get("activation", "identity"))
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        device = select_device(ctx.options) if may_run_torch(ctx.backend) else torch.device("cpu")
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        config = AutoConfig.from_pretrained(ctx.path, local_files_only=True)
        max_length = effective_max_length(ctx.max_sequence_length, tokenizer, config)
        if ctx.prepare_only:
            return cls(PrepareOnly(), tokenizer, max_length, activation)
        names = tuple(tokenizer.model_input_names)
        probe = tokenizer(
            [PROBE_QUERY] * len(PROBE_TEXTS), list(PROBE_TEXTS), truncation="only_second", max_length=max_length
        )
        pairs = [{name: probe[name][i] for name in names} for i in range(len(PROBE_TEXTS))]

        def evaluate(runner: Runner) -> np.ndarray:
            chunks = [
                padded_logits(runner, tokenizer, pairs[i : i + BATCH])[:, -1] for i in range(0, len(pairs), BATCH)
            ]
            return np.concatenate(chunks)

        runner, runtime = select(
            ctx,
            ClassifierLogits(ctx.path, names),
            evaluate,
            SCORES,
            open_runner,
            device=str(device),
            probe_key=f"{max_length}",
        )
        return cls(runner, tokenizer, max_length, activation, runtime)

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, ScoreTask):
            raise InvalidInput("this model only supports the score task")
        if not task.texts:
            raise InvalidInput("score needs at least one item")
        texts = list(task.texts)
        if task.overflow == "error":
            encoded = self._tokenize(task.query, texts, truncation=False)
            self._check_lengths(encoded["input_ids"])
        else:
            encoded = self._tokenize(task.query, texts, truncation=self._strategy(task.query))
        features = [{name: encoded[name][i] for name in self._input_names} for i in range(len(texts))]
        costs = [len(ids) for ids in encoded["input_ids"]]
        return Prepared(item_costs=costs, compat_key=SCORE_COMPAT_KEY, payload=features, input_tokens=sum(costs))

    def _forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        features = [f for part in parts for f in part.prepared.payload[part.start : part.stop]]
        scores = self._score(features)
        return split_by_parts(scores, parts)

    def _score(self, features: list[dict[str, list[int]]]) -> list[float]:
        """Pad tokenized pairs into one batch and return one float per pair."""
        # (batch, num_labels): the last column is "relevant" for 2-class heads
        # and the only column for 1-class heads.
        scores = padded_logits(self.runner, self._pad_tokenizer, features)[:, -1].astype(np.float64)
        if self.activation == "sigmoid":
            scores = 1.0 / (1.0 + np.exp(-scores))
        return [float(s) for s in scores]

    def memory_bytes(self) -> int:
        return self.runner.memory_bytes()

    def close(self) -> None:
        # Drop the weights now rather than when the last reference goes away.
        self.runner.close()

    def _tokenize(self, query: str, texts: list[str], truncation: bool | str) -> Mapping[str, list[list[int]]]:
        kwargs: dict[str, Any] = {"truncation": truncation, "verbose": False}
        if truncation:
            kwargs["max_length"] = self.max_length
        encoded: Mapping[str, list[list[int]]] = self.tokenizer([query] * len(texts), texts, **kwargs)
        return encoded

    def _strategy(self, query: str) -> str:
        """Cut only the document, unless the query alone leaves it no room."""
        query_tokens = len(self.tokenizer(query, add_special_tokens=False, verbose=False)["input_ids"])
        if query_tokens < self.max_length - self._pair_specials:
            return "only_second"
        return "longest_first"

    def _check_lengths(self, input_ids: list[list[int]]) -> None:
        for index, ids in enumerate(input_ids):
            if len(ids) > self.max_length:
                raise InputTooLong(
                    f"item {index}: query and text take {len(ids)} tokens, more than the model's {self.max_length}",
                    index=index,
                    tokens=len(ids),
                    max_tokens=self.max_length,
                )


def padded_logits(
    runner: Runner, tokenizer: PreTrainedTokenizerBase, features: list[dict[str, list[int]]]
) -> np.ndarray:
    batch = tokenizer.pad(features, padding=True, return_tensors="np")
    feed = {name: np.asarray(value, dtype=np.int64) for name, value in batch.items()}
    return runner(feed).astype(np.float32, copy=False)


def effective_max_length(requested: int | None, tokenizer: PreTrainedTokenizerBase, config: PretrainedConfig) -> int:
    """The smallest of the catalog limit, the tokenizer limit and the position table."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        positions = None
    elif config.model_type in _OFFSET_POSITIONS:
        # RoBERTa-style tables spend pad_token_id + 1 rows before position 0.
        positions -= (getattr(config, "pad_token_id", 0) or 0) + 1
    return tokenizer_limit(tokenizer, requested, positions)


# Model types whose learned positions start after pad_token_id (see RobertaEmbeddings).
_OFFSET_POSITIONS = frozenset({"roberta", "xlm-roberta", "camembert", "longformer"})
