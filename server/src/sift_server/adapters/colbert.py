"""ColBERT late interaction: one vector per token (``multivector``) and MaxSim scores.

Reads the PyLate / sentence-transformers folder layout: a BERT-family
transformer at the root, one or more bias-optional linear projections
(``modules.json`` entries of type ``...Dense``) and ColBERT's settings in
``config_sentence_transformers.json`` (prefixes, query and document lengths,
query expansion, skiplist). It runs them with plain transformers and torch:

* queries: ``[CLS] [Q] tokens [SEP]``, padded with ``[MASK]`` up to the query
  length (query augmentation; the mask tokens are not attended to unless the
  model says so, but each yields a vector); every position is kept;
* documents: ``[CLS] [D] tokens [SEP]``, cut at the document length; padding
  and skiplist tokens (punctuation) are dropped;
* every kept token vector is L2-normalized.

``score`` encodes the query and every candidate (two batches) and returns
MaxSim: the sum over query vectors of the best dot product (cosine) over the
document's vectors. Tokenization happens in ``prepare`` (real token counts are
the batch cost); ``forward`` pads the fused batch once.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sift_server.adapters._multivector import maxsim
from sift_server.adapters._tokenize import pad_rows
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
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
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

# PyLate's defaults when the folder's config leaves a setting out.
DEFAULTS: dict[str, Any] = {
    "query_prefix": "[Q] ",
    "document_prefix": "[D] ",
    "query_length": 32,
    "document_length": 180,
    "attend_to_expansion_tokens": False,
    "do_query_expansion": True,
    "skiplist_words": list(string.punctuation),
}


@dataclass(frozen=True, slots=True)
class Tokens:
    """One sequence ready for the model: ids, attention and which outputs to keep."""

    ids: list[int]
    attention: list[int]
    keep: list[bool]


@dataclass(frozen=True, slots=True)
class ScorePayload:
    query: Tokens
    documents: list[Tokens]


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _load_projections(folder: Path) -> torch.nn.Sequential:
    """The linear layers listed after the transformer in ``modules.json``."""
    layers: list[torch.nn.Module] = []
    modules = json.loads((folder / "modules.json").read_text()) if (folder / "modules.json").is_file() else []
    for entry in sorted(modules, key=lambda m: int(m["idx"]))[1:]:
        if not str(entry.get("type", "")).endswith("Dense"):
            raise ValueError(f"unsupported ColBERT module {entry.get('type')!r} in modules.json")
        sub = folder / str(entry["path"])
        config = _read_json(sub / "config.json")
        activation = str(config.get("activation_function", "torch.nn.modules.linear.Identity"))
        if not activation.endswith("Identity"):
            raise ValueError(f"unsupported projection activation {activation!r}")
        if config.get("use_residual"):
            raise ValueError("residual projections are not supported")
        linear = torch.nn.Linear(int(config["in_features"]), int(config["out_features"]), bias=bool(config["bias"]))
        if (sub / "model.safetensors").is_file():
            from safetensors.torch import load_file

            state = load_file(str(sub / "model.safetensors"))
        else:
            state = torch.load(sub / "pytorch_model.bin", map_location="cpu", weights_only=True)
        linear.load_state_dict({key.removeprefix("linear."): value for key, value in state.items()})
        layers.append(linear)
    if not layers:
        raise ValueError("a ColBERT model needs a projection (a Dense module in modules.json)")
    return torch.nn.Sequential(*layers)


class ColbertAdapter(Adapter):
    def __init__(
        self,
        tokenizer: Any,
        model: torch.nn.Module,
        projection: torch.nn.Sequential,
        settings: dict[str, Any],
        device: torch.device,
        max_length: int | None,
    ) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.projection = projection
        self.device = device
        limit = max_length or 10**9
        self.query_length = min(int(settings["query_length"]), limit)
        self.document_length = min(int(settings["document_length"]), limit)
        self.expand_queries = bool(settings["do_query_expansion"])
        self.attend_expansion = bool(settings["attend_to_expansion_tokens"]) and self.expand_queries
        self.query_prefix_id = self._prefix_id(str(settings["query_prefix"]))
        self.document_prefix_id = self._prefix_id(str(settings["document_prefix"]))
        self.skiplist = frozenset(tokenizer.convert_tokens_to_ids(w) for w in settings["skiplist_words"])
        mask_id = tokenizer.mask_token_id
        self.expansion_id = int(mask_id if mask_id is not None else tokenizer.pad_token_id or 0)
        last: Any = projection[-1]
        self.token_dims = int(last.out_features)
        self._token_types = "token_type_ids" in tokenizer.model_input_names
        self.info = AdapterInfo(
            tasks=frozenset({"encode", "score"}),
            outputs=("multivector",),
            dims={"multivector": self.token_dims},
            max_sequence_length=self.document_length,
        )

    def _prefix_id(self, prefix: str) -> int | None:
        if not prefix:
            return None
        token_id = self.tokenizer.convert_tokens_to_ids(prefix)
        if token_id is None or token_id == self.tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no token for the ColBERT prefix {prefix!r}")
        return int(token_id)

    @classmethod
    def load(cls, ctx: LoadContext) -> ColbertAdapter:
        from transformers import AutoModel, AutoTokenizer

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        settings = {**DEFAULTS, **_read_json(ctx.path / "config_sentence_transformers.json")}
        for key in DEFAULTS:
            if key in ctx.options:
                settings[key] = ctx.options[key]
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        model = AutoModel.from_pretrained(ctx.path, local_files_only=True)
        projection = _load_projections(ctx.path)
        model.to(device).eval()
        projection.to(device).eval()
        positions = getattr(model.config, "max_position_embeddings", None)
        limits = [x for x in (ctx.max_sequence_length, positions) if x]
        return cls(tokenizer, model, projection, settings, device, min(limits) if limits else None)

    # ---- prepare (event loop) -------------------------------------------

    def _tokens(self, texts: Sequence[str], *, is_query: bool, error: bool) -> list[Tokens]:
        length = self.query_length if is_query else self.document_length
        prefix = self.query_prefix_id if is_query else self.document_prefix_id
        room = length - (1 if prefix is not None else 0)
        kwargs: dict[str, Any] = {"verbose": False}
        if not error:
            kwargs.update(truncation=True, max_length=room)
        # Stripped as sentence-transformers' Transformer module does before tokenizing.
        rows = self.tokenizer([text.strip() for text in texts], **kwargs)["input_ids"]
        out = []
        for index, ids in enumerate(rows):
            if len(ids) > room:
                raise InputTooLong(
                    f"item {index}: {len(ids)} tokens; this model takes at most {room} "
                    "(use overflow_policy 'truncate' to cut it)",
                    index=index,
                    tokens=len(ids),
                    max_tokens=room,
                )
            if prefix is not None:
                ids = [ids[0], prefix, *ids[1:]]
            attention = [1] * len(ids)
            if is_query:
                keep = [True] * len(ids)
                if self.expand_queries:
                    extra = length - len(ids)
                    ids = ids + [self.expansion_id] * extra
                    attention = attention + [1 if self.attend_expansion else 0] * extra
                    keep = keep + [True] * extra
            else:
                keep = [token not in self.skiplist for token in ids]
            out.append(Tokens(ids, attention, keep))
        return out

    def prepare(self, task: TaskInput) -> Prepared:
        error = getattr(task, "overflow", "truncate") == "error"
        if isinstance(task, EncodeTask):
            texts = [f"{task.instruction.rstrip()} {t}" for t in task.texts] if task.instruction else task.texts
            tokens = self._tokens(texts, is_query=task.is_query, error=error)
            costs = [len(t.ids) for t in tokens]
            return Prepared(costs, ("colbert", "encode"), tokens, input_tokens=sum(costs))
        if isinstance(task, ScoreTask):
            if not task.texts:
                raise InvalidInput("score needs at least one item")
            [query] = self._tokens([task.query], is_query=True, error=error)
            documents = self._tokens(task.texts, is_query=False, error=error)
            costs = [len(t.ids) for t in documents]
            input_tokens = sum(costs) + len(query.ids)
            costs[0] += len(query.ids)  # the query runs with the part that holds the first item
            return Prepared(costs, ("colbert", "score"), ScorePayload(query, documents), input_tokens=input_tokens)
        raise InvalidInput("this model supports encode and score")

    # ---- forward (executor thread) --------------------------------------

    def _embed(self, sequences: list[Tokens]) -> list[torch.Tensor]:
        ids, mask = pad_rows([s.ids for s in sequences], self.expansion_id, [s.attention for s in sequences])
        width = ids.shape[1]
        inputs = {
            "input_ids": torch.from_numpy(ids).to(self.device),
            "attention_mask": torch.from_numpy(mask).to(self.device),
        }
        if self._token_types:
            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        with torch.inference_mode():
            hidden = self.model(**inputs).last_hidden_state
            vectors = self.projection(hidden)
            out = []
            for i, s in enumerate(sequences):
                keep = torch.tensor(s.keep + [False] * (width - len(s.keep)), device=vectors.device)
                out.append(torch.nn.functional.normalize(vectors[i][keep], p=2, dim=1))
        return out

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        if isinstance(parts[0].prepared.payload, ScorePayload):
            return self._score(parts)
        sequences = [t for part in parts for t in part.prepared.payload[part.start : part.stop]]
        embedded = [e.float().cpu().numpy() for e in self._embed(sequences)]  # (tokens, dims) each
        return split_by_parts([{"multivector": e} for e in embedded], parts)

    def _score(self, parts: Sequence[Part]) -> list[list[Any]]:
        # Queries (expanded to the query length) and documents (usually shorter) run
        # as two batches, so documents are not padded to the query length.
        payloads: list[ScorePayload] = [part.prepared.payload for part in parts]
        queries = self._embed([payload.query for payload in payloads])
        documents = self._embed(
            [
                d
                for part, payload in zip(parts, payloads, strict=True)
                for d in payload.documents[part.start : part.stop]
            ]
        )
        per_part = split_by_parts(documents, parts)
        return [[maxsim(query, d) for d in docs] for query, docs in zip(queries, per_part, strict=True)]

    def memory_bytes(self) -> int:
        return module_bytes(self.model) + module_bytes(self.projection)

    def close(self) -> None:
        release_module(self.model, self.device)
