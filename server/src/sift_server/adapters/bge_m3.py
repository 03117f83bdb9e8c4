"""BGE-M3: dense, sparse and multivector embeddings from one forward, and their scores.

The folder is BAAI/bge-m3's: an XLM-RoBERTa encoder with two heads saved beside it as
PyTorch state dicts, ``colbert_linear.pt`` (hidden -> hidden) and ``sparse_linear.pt``
(hidden -> 1). One forward of the encoder (on the entry's backend: PyTorch, ONNX
Runtime or OpenVINO, ``backends``) gives the last hidden states; the heads run in
numpy on them, the same for every backend, as FlagEmbedding's ``BGEM3FlagModel`` and
the reference server compute them:

* ``dense``: the first (``<s>``) token's state, L2-normalized;
* ``sparse``: ``relu(sparse_linear(state))`` per token; one weight per token id, the
  largest, in order of first appearance, the special tokens (``<s>``, ``</s>``,
  ``<pad>``, ``<unk>``) and zero weights dropped;
* ``multivector``: ``colbert_linear(state)`` for every token after ``<s>`` (``</s>``
  included), each L2-normalized.

``options.normalize: false`` leaves dense and multivector unnormalized. An
``instruction`` is prepended as ``f"{instruction} {text}"`` (the reference's way).
The heads run per row for the outputs its request asked for (``output_types``; a
score mode's), so requests asking for different outputs share a forward and a
dense-only request never holds its tokens' vectors.

``score`` encodes the query and the candidates and combines them by
``options.score_mode`` (default ``dense``): ``dense`` (cosine), ``sparse`` (the sum of
products of shared token weights), ``colbert`` (MaxSim divided by the number of query
vectors) or ``hybrid`` (``score_weights``, default dense 0.4, sparse 0.2, colbert 0.4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._probes import BATCH, PROBE_TEXTS
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._st_layout import read_json
from sift_server.adapters._tokenize import TextTokenizer, load_tokenizer, pad_rows
from sift_server.adapters.backends import buckets, call_cost
from sift_server.adapters.backends.choice import open_runner
from sift_server.adapters.backends.seam import Graph, Runner
from sift_server.adapters.backends.select import Agreement, select
from sift_server.adapters.base import (
    Adapter,
    AdapterInfo,
    EncodeTask,
    LoadContext,
    Part,
    Prepared,
    ScoreTask,
    TaskInput,
)
from sift_server.adapters.sentence_embedder import _device, _shape_runner
from sift_server.adapters.sparse_encoder import SparseVector
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    import torch

ADAPTER = "bge-m3"
SCORE_MODES = ("dense", "sparse", "colbert", "hybrid")
# The reference server's hybrid weights (the BGE-M3 paper's).
DEFAULT_WEIGHTS: Mapping[str, float] = {"dense": 0.4, "sparse": 0.2, "colbert": 0.4}
HEADS = ("colbert_linear.pt", "sparse_linear.pt")


class _HiddenStates(Graph):
    """The encoder alone: (input_ids, attention_mask) -> last_hidden_state."""

    kind = "bge-m3"
    inputs = ("input_ids", "attention_mask")
    output = "last_hidden_state"

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

        return Module(AutoModel.from_pretrained(self.folder, local_files_only=True, add_pooling_layer=False))


@dataclass(frozen=True, slots=True)
class Heads:
    """The M3 heads as numpy arrays, and the token ids the sparse output drops."""

    colbert_weight: np.ndarray  # (out, hidden)
    colbert_bias: np.ndarray  # (out,)
    sparse_weight: np.ndarray  # (hidden,)
    sparse_bias: float
    unused_ids: np.ndarray  # int64

    def dense(self, hidden: np.ndarray, normalize: bool) -> np.ndarray:
        return _normalized(hidden[0]) if normalize else hidden[0].copy()

    def multivector(self, hidden: np.ndarray, normalize: bool) -> np.ndarray:
        vectors = hidden[1:] @ self.colbert_weight.T + self.colbert_bias
        return _normalized(vectors) if normalize else vectors

    def sparse(self, hidden: np.ndarray, ids: np.ndarray) -> SparseVector:
        weights = np.maximum(hidden @ self.sparse_weight + self.sparse_bias, 0.0).astype(np.float32)
        keep = (weights > 0) & ~np.isin(ids, self.unused_ids)
        kept_ids, kept_weights = ids[keep], weights[keep]
        unique, first, inverse = np.unique(kept_ids, return_index=True, return_inverse=True)
        largest = np.zeros(len(unique), dtype=np.float32)
        np.maximum.at(largest, inverse, kept_weights)
        order = np.argsort(first, kind="stable")
        return SparseVector(unique[order].astype(np.int32), largest[order])


def _normalized(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    unit: np.ndarray = (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return unit


OUTPUTS = ("dense", "sparse", "multivector")
# What each score mode compares.
MODE_OUTPUTS: Mapping[str, frozenset[str]] = {
    "dense": frozenset({"dense"}),
    "sparse": frozenset({"sparse"}),
    "colbert": frozenset({"multivector"}),
}


@dataclass(frozen=True, slots=True)
class EncodePayload:
    rows: list[list[int]]
    normalize: bool
    outputs: frozenset[str]


@dataclass(frozen=True, slots=True)
class ScorePayload:
    query: list[int]
    documents: list[list[int]]
    mode: str
    weights: Mapping[str, float]


def _load_heads(folder: Path) -> Heads:
    import torch
    from transformers import AutoTokenizer

    colbert = torch.load(folder / HEADS[0], map_location="cpu", weights_only=True)
    sparse = torch.load(folder / HEADS[1], map_location="cpu", weights_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    # FlagEmbedding's unused tokens: the ones its lexical weights never hold.
    unused = [tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id]
    return Heads(
        colbert_weight=colbert["weight"].float().numpy(),
        colbert_bias=colbert["bias"].float().numpy(),
        sparse_weight=sparse["weight"].float().numpy().reshape(-1),
        sparse_bias=float(sparse["bias"].float().reshape(-1)[0]),
        unused_ids=np.asarray([i for i in unused if i is not None], dtype=np.int64),
    )


def _check_folder(folder: Path, config: Mapping[str, Any]) -> None:
    missing = [name for name in HEADS if not (folder / name).is_file()]
    if missing:
        raise UnservableModel(
            f"{ADAPTER} cannot serve {folder} exactly: it has no {' or '.join(missing)} "
            "(BGE-M3's sparse and multivector heads)."
        )
    model_type = config.get("model_type")
    if model_type != "xlm-roberta":
        raise UnservableModel(
            f"{ADAPTER} cannot serve {folder} exactly: its encoder is {model_type!r}; BGE-M3 is an XLM-RoBERTa."
        )


def _agreement(tolerance: float) -> Any:
    """A candidate agrees when its dense and multivector rows are within ``tolerance``
    cosine of the reference's and its sparse outputs keep the same token ids with
    weights within ``1 - tolerance`` relative (the ids exactly: a weight that crosses
    zero changes them)."""

    def agree(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> tuple[bool, float]:
        worst = 1.0
        for a, b in zip(got, expected, strict=True):
            for kind in ("dense", "multivector"):
                x = np.atleast_2d(a[kind]).astype(np.float64)
                y = np.atleast_2d(b[kind]).astype(np.float64)
                cosines = (x * y).sum(axis=1) / np.maximum(np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1), 1e-30)
                worst = min(worst, float(cosines.min()))
            if not np.array_equal(a["sparse"].indices, b["sparse"].indices):
                return False, -1.0
            gap = np.abs(a["sparse"].values - b["sparse"].values) / np.maximum(np.abs(b["sparse"].values), 1.0)
            worst = min(worst, 1.0 - float(gap.max(initial=0.0)))
        return worst >= tolerance, worst

    return agree


M3_AGREEMENT: Agreement[Any] = Agreement(0.9999, _agreement)


class BgeM3Adapter(Adapter):
    def __init__(
        self,
        tokenizer: TextTokenizer,
        runner: Runner,
        heads: Heads,
        *,
        hidden_size: int,
        vocab_size: int,
        normalize: bool,
        max_length: int,
        runtime: dict[str, Any] | None = None,
        call_cost_tokens: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.runner = runner
        self.heads = heads
        self.normalize = normalize
        self.max_length = max_length
        self.call_cost_tokens = call_cost_tokens
        self.pad_id = tokenizer.pad_token_id
        self.info = AdapterInfo(
            tasks=frozenset({"encode", "score"}),
            outputs=OUTPUTS,
            dims={"dense": hidden_size, "sparse": vocab_size, "multivector": int(heads.colbert_weight.shape[0])},
            max_sequence_length=max_length,
            runtime=runtime or runner.describe(),
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> BgeM3Adapter:
        folder = ctx.path
        config = read_json(folder / "config.json")
        _check_folder(folder, config)
        # XLM-RoBERTa's positions start after the padding id: 8194 positions hold 8192 tokens.
        positions = int(config.get("max_position_embeddings") or 514) - int(config.get("pad_token_id", 1)) - 1
        max_length = min(int(ctx.max_sequence_length or positions), positions)
        normalize = ctx.options.get("normalize", True)
        if not isinstance(normalize, bool):
            raise ValueError(f"option normalize must be true or false, not {normalize!r}")
        tokenizer = load_tokenizer(folder)
        heads = _load_heads(folder)
        pad_id = tokenizer.pad_token_id
        probe_rows = tokenizer.ids(PROBE_TEXTS, max_length)

        def evaluate(runner: Runner) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for i in range(0, len(probe_rows), BATCH):
                chunk = probe_rows[i : i + BATCH]
            out.extend(_outputs(runner, heads, chunk, pad_id, [(True, frozenset(OUTPUTS))] * len(chunk)))
            return out

        runner, runtime = select(
            ctx,
            _HiddenStates(folder),
            evaluate,
            M3_AGREEMENT,
            open_runner,
            device=_device(ctx.options, ctx.backend),
            probe_key=f"m3:{max_length}",
        )
        measured = call_cost.measure(_shape_runner(runner, max(probe_rows, key=len), pad_id))
        cost = buckets.CALL_COST_TOKENS if measured is None else measured
        return cls(
            tokenizer,
            runner,
            heads,
            hidden_size=int(config.get("hidden_size") or heads.colbert_weight.shape[1]),
            vocab_size=int(config.get("vocab_size") or 0),
            normalize=normalize,
            max_length=max_length,
            runtime={**runtime, "call_cost_tokens": cost},
            call_cost_tokens=cost,
        )

    # ---- prepare (event loop) -------------------------------------------

    def _rows(self, texts: Sequence[str], instruction: str | None, overflow: str) -> list[list[int]]:
        if instruction:
            texts = [f"{instruction} {text}" for text in texts]
        if overflow != "error":
            return self.tokenizer.ids(texts, self.max_length)
        rows = self.tokenizer.ids(texts, None)
        for index, row in enumerate(rows):
            if len(row) > self.max_length:
                raise InputTooLong(
                    f"Item {index} has {len(row)} tokens; this model accepts at most {self.max_length} "
                    "(use overflow_policy 'truncate' to cut it).",
                    index=index,
                    tokens=len(row),
                    max_tokens=self.max_length,
                )
        return rows

    def _normalize_option(self, options: Mapping[str, Any]) -> bool:
        value = options.get("normalize", self.normalize)
        if not isinstance(value, bool):
            raise InvalidInput(f"Option 'normalize' must be true or false, not {value!r}.")
        return value

    def prepare(self, task: TaskInput) -> Prepared:
        if isinstance(task, EncodeTask):
            normalize = self._normalize_option(task.options)
            rows = self._rows(task.texts, task.instruction, task.overflow)
            costs = [len(row) for row in rows]
            outputs = frozenset(task.output_types or OUTPUTS)
            return Prepared(costs, ("m3", "encode"), EncodePayload(rows, normalize, outputs), input_tokens=sum(costs))
        if isinstance(task, ScoreTask):
            if not task.texts:
                raise InvalidInput("score needs at least one item")
            mode, weights = score_mode(task.options)
            [query] = self._rows([task.query], task.instruction, task.overflow)
            documents = self._rows(task.texts, task.instruction, task.overflow)
            costs = [len(row) for row in documents]
            input_tokens = sum(costs) + len(query)
            costs[0] += len(query)  # the query runs with the part that holds the first item
            scored = ScorePayload(query, documents, mode, weights)
            return Prepared(costs, ("m3", "score"), scored, input_tokens=input_tokens)
        raise InvalidInput("This model supports encode and score.")

    # ---- forward (executor thread) --------------------------------------

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        if isinstance(parts[0].prepared.payload, ScorePayload):
            return self._score(parts)
        rows: list[list[int]] = []
        wants: list[tuple[bool, frozenset[str]]] = []
        for part in parts:
            payload: EncodePayload = part.prepared.payload
            rows.extend(payload.rows[part.start : part.stop])
            wants.extend([(payload.normalize, payload.outputs)] * (part.stop - part.start))
        outputs = _outputs(self.runner, self.heads, rows, self.pad_id, wants, self.call_cost_tokens)
        return split_by_parts(outputs, parts)

    def _score(self, parts: Sequence[Part]) -> list[list[Any]]:
        payloads: list[ScorePayload] = [part.prepared.payload for part in parts]
        rows: list[list[int]] = []
        wants: list[tuple[bool, frozenset[str]]] = []
        for part, payload in zip(parts, payloads, strict=True):
            rows.append(payload.query)
            rows.extend(payload.documents[part.start : part.stop])
            # Scores compare unit vectors (the reference normalizes again before it compares).
            wants.extend([(True, _mode_outputs(payload.mode, payload.weights))] * (1 + part.stop - part.start))
        outputs = _outputs(self.runner, self.heads, rows, self.pad_id, wants, self.call_cost_tokens)
        answers: list[list[Any]] = []
        at = 0
        for part, payload in zip(parts, payloads, strict=True):
            query = outputs[at]
            documents = outputs[at + 1 : at + 1 + part.stop - part.start]
            at += 1 + part.stop - part.start
            answers.append([pair_score(query, d, payload.mode, payload.weights) for d in documents])
        return answers

    def memory_bytes(self) -> int:
        return self.runner.memory_bytes() + self.heads.colbert_weight.nbytes

    def close(self) -> None:
        self.runner.close()


def _outputs(
    runner: Runner,
    heads: Heads,
    rows: Sequence[Sequence[int]],
    pad_id: int,
    wants: Sequence[tuple[bool, frozenset[str]]],
    call_cost_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """Per row, the outputs ``wants`` names for it (whether to normalize, which of dense
    vector, sparse weights and token vectors; float32). A row's outputs do not depend
    on its batch: padded positions are masked out of attention and cut off before the heads."""
    input_ids, mask = pad_rows(rows, pad_id)
    width = input_ids.shape[1]
    feed = {"input_ids": input_ids, "attention_mask": mask}

    def hidden_of(part: Mapping[str, np.ndarray]) -> np.ndarray:
        hidden = np.asarray(runner(part), dtype=np.float32)
        # Groups are cut to their longest row: pad back so that every group has one width.
        return np.pad(hidden, ((0, 0), (0, width - hidden.shape[1]), (0, 0)))

    if call_cost_tokens is None:
        hidden = hidden_of(feed)
    else:
        hidden = buckets.run_grouped(hidden_of, feed, "attention_mask", tuple(feed), call_cost_tokens)
    out = []
    for i, row in enumerate(rows):
        states = hidden[i, : len(row)]
        normalize, kinds = wants[i]
        item: dict[str, Any] = {}
        if "dense" in kinds:
            item["dense"] = heads.dense(states, normalize)
        if "sparse" in kinds:
            item["sparse"] = heads.sparse(states, input_ids[i, : len(row)])
        if "multivector" in kinds:
            item["multivector"] = heads.multivector(states, normalize)
        out.append(item)
    return out


def _mode_outputs(mode: str, weights: Mapping[str, float]) -> frozenset[str]:
    if mode != "hybrid":
        return MODE_OUTPUTS[mode]
    return frozenset().union(*(MODE_OUTPUTS[k] for k in DEFAULT_WEIGHTS if weights[k] > 0))


def score_mode(options: Mapping[str, Any]) -> tuple[str, dict[str, float]]:
    """``options.score_mode`` and (for hybrid) ``options.score_weights``, checked."""
    mode = options.get("score_mode", "dense")
    if not isinstance(mode, str) or mode not in SCORE_MODES:
        raise InvalidInput(f"Invalid score_mode {mode!r}; expected one of {', '.join(SCORE_MODES)}.")
    weights = dict(DEFAULT_WEIGHTS)
    override = options.get("score_weights")
    if override is not None:
        if not isinstance(override, dict):
            raise InvalidInput("score_weights must be an object of {dense, sparse, colbert} to numbers.")
        unknown = sorted(set(override) - set(DEFAULT_WEIGHTS))
        if unknown:
            raise InvalidInput(f"Unknown score_weights keys {unknown}; allowed: dense, sparse, colbert.")
        for key, value in override.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InvalidInput(f"score_weights[{key!r}] must be a non-negative number, not {value!r}.")
            weights[key] = float(value)
    if mode == "hybrid" and sum(weights.values()) <= 0:
        raise InvalidInput("score_weights for hybrid mode need at least one positive weight.")
    return mode, weights


def pair_score(query: Mapping[str, Any], document: Mapping[str, Any], mode: str, weights: Mapping[str, float]) -> float:
    """One candidate's score under ``mode`` (``query`` and ``document`` normalized)."""
    if mode != "hybrid":
        return _similarity(query, document, mode)
    return float(sum(weights[k] * _similarity(query, document, k) for k in DEFAULT_WEIGHTS if weights[k] > 0))


def _similarity(query: Mapping[str, Any], document: Mapping[str, Any], kind: str) -> float:
    if kind == "dense":
        return float(np.dot(query["dense"].astype(np.float64), document["dense"].astype(np.float64)))
    if kind == "sparse":
        q: SparseVector = query["sparse"]
        d: SparseVector = document["sparse"]
        lookup = dict(zip(d.indices.tolist(), d.values.tolist(), strict=True))
        pairs = zip(q.indices.tolist(), q.values.tolist(), strict=True)
        return float(sum(weight * lookup[token] for token, weight in pairs if token in lookup))
    q_vectors: np.ndarray = query["multivector"]
    d_vectors: np.ndarray = document["multivector"]
    if q_vectors.size == 0 or d_vectors.size == 0:
        return 0.0
    return float((q_vectors @ d_vectors.T).max(axis=1).sum() / q_vectors.shape[0])
