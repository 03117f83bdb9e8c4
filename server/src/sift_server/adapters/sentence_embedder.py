"""Dense text embedders in the sentence-transformers layout (transformer + pooling + normalize).

Tokenization happens per request in ``prepare`` (no padding: the real token
counts are the batch cost); ``forward`` pads the whole batch once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from sift_server.adapters._lora import LoraSlots, lora_of
from sift_server.adapters._torch_runtime import configure_threads, module_bytes
from sift_server.adapters.base import Adapter, AdapterInfo, EncodeTask, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InputTooLong, InvalidInput

Pooling = Literal["mean", "cls", "max"]


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _pooling_from_folder(folder: Path) -> Pooling | None:
    config = _read_json(folder / "1_Pooling" / "config.json")
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_max_tokens"):
        return "max"
    return None


class SentenceEmbedderAdapter(Adapter):
    def __init__(
        self,
        tokenizer: Any,
        model: torch.nn.Module,
        *,
        pooling: Pooling,
        normalize: bool,
        max_length: int,
        query_prefix: str,
        document_prefix: str,
    ) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.pooling = pooling
        self.normalize = normalize
        self.max_length = max_length
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.loras = LoraSlots(model)
        config: Any = model.config
        hidden = int(config.hidden_size)
        self.info = AdapterInfo(
            tasks=frozenset({"encode"}),
            outputs=("dense",),
            dims={"dense": hidden},
            max_sequence_length=max_length,
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> SentenceEmbedderAdapter:
        configure_threads(ctx.torch_threads)
        folder = ctx.path
        options = ctx.options
        st_config = _read_json(folder / "sentence_bert_config.json")
        pooling = options.get("pooling") or _pooling_from_folder(folder) or "mean"
        if pooling not in ("mean", "cls", "max"):
            raise ValueError(f"pooling must be mean, cls or max, not {pooling!r}")
        max_length = int(ctx.max_sequence_length or st_config.get("max_seq_length") or 512)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModel.from_pretrained(folder, local_files_only=True)
        model.eval()
        return cls(
            tokenizer,
            model,
            pooling=pooling,
            normalize=bool(options.get("normalize", True)),
            max_length=max_length,
            query_prefix=str(options.get("query_prefix", "")),
            document_prefix=str(options.get("document_prefix", "")),
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
            ids = self.tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
            for index, row in enumerate(ids):
                if len(row) > self.max_length:
                    raise InputTooLong(
                        f"Item {index} has {len(row)} tokens; this model accepts at most {self.max_length} "
                        "(use overflow_policy 'truncate' to cut it)."
                    )
        else:
            ids = self.tokenizer(texts, add_special_tokens=True, truncation=True, max_length=self.max_length)[
                "input_ids"
            ]
        costs = [len(row) for row in ids]
        return Prepared(item_costs=costs, compat_key=None, payload=ids, input_tokens=sum(costs))

    # ---- forward (executor thread) --------------------------------------

    supports_lora = True

    def load_lora(self, name: str, path: Path) -> None:
        self.loras.load(name, path)

    def unload_lora(self, name: str) -> None:
        self.loras.unload(name)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        name = lora_of(parts)
        with self.loras.active(name):
            return self._forward(parts)

    def _forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        rows: list[list[int]] = []
        for part in parts:
            rows.extend(part.prepared.payload[part.start : part.stop])
        width = max(len(r) for r in rows)
        input_ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        ids_t = torch.from_numpy(input_ids)
        mask_t = torch.from_numpy(mask)
        with torch.inference_mode():
            hidden = self.model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
            pooled = self._pool(hidden, mask_t)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        vectors = pooled.float().numpy()
        out: list[list[Any]] = []
        offset = 0
        for part in parts:
            n = part.stop - part.start
            out.append(list(vectors[offset : offset + n]))
            offset += n
        return out

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.pooling == "cls":
            return hidden[:, 0]
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "max":
            return hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values
        summed = (hidden * weights).sum(dim=1)
        return summed / weights.sum(dim=1).clamp(min=1e-9)

    def memory_bytes(self) -> int:
        return module_bytes(self.model)
