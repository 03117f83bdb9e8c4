"""Document-image retrievers of the ColPali family: page images and text queries to
multivectors (one vector per token of the model's sequence), and MaxSim scores.

Served with transformers' own classes, in their ``-hf`` folder layout:
``ColPaliForRetrieval`` + ``ColPaliProcessor`` (PaliGemma backbone, e.g.
``vidore/colpali-v1.3-hf``) and ``ColQwen2ForRetrieval`` + ``ColQwen2Processor``
(Qwen2-VL backbone, e.g. ``vidore/colqwen2-v1.0-hf``; its image tokens given Qwen2-VL's 2-D
rotary positions, as colpali-engine's ``ColQwen2`` gives them). Other layouts are refused at load
(docs/models.md, "Document-image retrievers", says which and why).

What a vector is, as the reference server makes it for ``vidore/colpali-v1.3-hf``:

- an item with images is encoded as its images (its text ignored), except a query
  (``options.is_query``) with text, which is encoded as its text;
- an image is the processor's own sequence for it (image tokens, then the visual
  prompt); a text is the processor's query (its prefix, the text, the ten augmentation
  tokens); every token of that sequence yields a vector, padding yields none;
- vectors are L2-normalised (``normalize``, default true, again after the model);
- an item with several images gets their sequences' vectors one after the other.

``score`` encodes the query as a query and every candidate as a document (images, or
text where a candidate has none), and answers MaxSim: the sum over the query's vectors
of the best dot product over the candidate's vectors.

Images arrive decoded to RGB by the service layer (service/images.py, the pipeline and
limits the ``clip`` adapter uses). ``prepare`` runs the model's own processor per item
(in the prep thread when a request has images); ``forward`` pads the fused batch once,
images and texts as two forwards, so concurrent requests share them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from sift_server.adapters._multivector import joined_per_item, maxsim
from sift_server.adapters._refusal import UnservableModel
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

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

Family = Literal["colpali", "colqwen2", "colqwen2_5", "colidefics3"]
# The reference catalog's text limit for these models when the entry sets none.
DEFAULT_MAX_LENGTH = 2048
# The backbones each family's transformers class is served with (what the parity covers).
_BACKBONES: dict[str, str] = {"colpali": "paligemma", "colqwen2": "qwen2_vl"}


@dataclass(frozen=True, slots=True)
class Row:
    """One sequence for the model: its token ids and, for an image, its pixels
    (ColPali: ``(3, h, w)``; ColQwen2: ``(patches, features)`` with its ``grid``; colSmol:
    ``(tiles, 3, h, w)`` with its ``pixel_mask``)."""

    ids: list[int]
    pixels: np.ndarray | None = None
    grid: tuple[int, int, int] | None = None
    pixel_mask: np.ndarray | None = None


# An item: one row per image, or one text row.
Rows = tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class ScorePayload:
    query: Row
    documents: list[Rows]


def _family(path_config: dict[str, Any]) -> Family:
    model_type = path_config.get("model_type")
    if model_type not in _BACKBONES:
        raise UnservableModel(
            "the colpali adapter serves transformers' ColPaliForRetrieval and ColQwen2ForRetrieval "
            f"folders (model_type colpali or colqwen2, the '-hf' checkpoints), not {model_type!r}"
        )
    family: Family = "colpali" if model_type == "colpali" else "colqwen2"
    backbone = (path_config.get("vlm_config") or {}).get("model_type")
    if backbone != _BACKBONES[family]:
        raise UnservableModel(
            f"the colpali adapter serves {family} on a {_BACKBONES[family]} backbone, not {backbone!r}"
        )
    return family


def _check_layout(ctx: LoadContext) -> Family:
    if (ctx.path / "adapter_config.json").is_file():
        raise UnservableModel(
            "the folder is a PEFT adapter (colpali-engine's layout); the colpali adapter serves the "
            "merged transformers checkpoints (the '-hf' repositories, e.g. vidore/colpali-v1.3-hf)"
        )
    config_file = ctx.path / "config.json"
    if not config_file.is_file():
        raise UnservableModel("the folder has no config.json")
    return _family(json.loads(config_file.read_text(encoding="utf-8")))


class ColPaliAdapter(Adapter):
    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        family: Family,
        device: torch.device,
        normalize: bool,
        max_length: int,
        dims: int | None = None,
    ) -> None:
        self.model = model
        self.processor = processor
        self.family = family
        self.device = device
        self.normalize = normalize
        self.max_length = max_length
        tokenizer = processor.tokenizer
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.left_padding = tokenizer.padding_side == "left"
        # The fast tokenizer is not safe to share between threads (the event loop
        # tokenizes texts, the prep thread images); calls are short.
        self._lock = threading.Lock()
        dims = dims or int(model.config.embedding_dim)
        self.info = AdapterInfo(
            tasks=frozenset({"encode", "score"}),
            inputs=("text", "image"),
            outputs=("multivector",),
            dims={"multivector": dims},
            max_sequence_length=max_length,
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> ColPaliAdapter:
        import torch

        family = _check_layout(ctx)
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        model: Any
        processor: Any
        if family == "colpali":
            from transformers import ColPaliForRetrieval, ColPaliProcessor

            processor = ColPaliProcessor.from_pretrained(ctx.path, local_files_only=True)
            model = ColPaliForRetrieval.from_pretrained(ctx.path, local_files_only=True, dtype=torch.float32)
        else:
            from transformers import ColQwen2ForRetrieval, ColQwen2Processor

            processor = ColQwen2Processor.from_pretrained(ctx.path, local_files_only=True)
            model = ColQwen2ForRetrieval.from_pretrained(ctx.path, local_files_only=True, dtype=torch.float32)
        model.to(device).eval()
        return cls(
            model,
            processor,
            family=family,
            device=device,
            normalize=bool(ctx.options.get("normalize", True)),
            max_length=int(ctx.max_sequence_length or DEFAULT_MAX_LENGTH),
        )

    # ---- prepare (event loop, or the prep thread for images) ------------

    def _query_ids(self, text: str) -> list[int]:
        """The processor's query sequence for ``text`` (prefix, text, augmentation tokens)."""
        with self._lock:
            encoded = self.processor(text=[text], return_tensors="np")
        return [int(i) for i in encoded["input_ids"][0]]

    def _text(self, text: str, index: int, overflow: str) -> Row:
        ids = self._query_ids(text)
        if len(ids) > self.max_length:
            if overflow == "error":
                raise InputTooLong(
                    f"item {index}: {len(ids)} tokens; this model takes at most {self.max_length} "
                    "(use overflow_policy 'truncate' to cut it)",
                    index=index,
                    tokens=len(ids),
                    max_tokens=self.max_length,
                )
            ids = ids[: self.max_length]
        return Row(ids)

    def _image(self, image: Image) -> Row:
        with self._lock:
            encoded = self.processor(images=[image], return_tensors="pt")
        ids = [int(i) for i in encoded["input_ids"][0]]
        pixels = encoded["pixel_values"][0].numpy().astype(np.float32, copy=False)
        if self.family == "colpali":
            return Row(ids, pixels)
        t, h, w = (int(x) for x in encoded["image_grid_thw"][0])
        # The processor pads patches to the batch's longest; one image has none.
        return Row(ids, pixels[: t * h * w], (t, h, w))

    def _item(self, text: str, images: Sequence[Image], index: int, *, is_query: bool, overflow: str) -> Rows:
        if images and not (is_query and text):
            return tuple(self._image(image) for image in images)
        return (self._text(text, index, overflow),)

    def prepare(self, task: TaskInput) -> Prepared:
        if isinstance(task, EncodeTask):
            items = [
                self._item(
                    text,
                    task.images[index] if task.images else (),
                    index,
                    is_query=task.is_query,
                    overflow=task.overflow,
                )
                for index, text in enumerate(task.texts)
            ]
            costs = [sum(len(row.ids) for row in rows) for rows in items]
            return Prepared(costs, (self.family, "encode"), items, input_tokens=_text_tokens(items))
        if isinstance(task, ScoreTask):
            if not task.texts:
                raise InvalidInput("score needs at least one item")
            query = self._text(task.query, 0, task.overflow)
            documents = [
                self._item(
                    text, task.images[index] if task.images else (), index, is_query=False, overflow=task.overflow
                )
                for index, text in enumerate(task.texts)
            ]
            costs = [sum(len(row.ids) for row in rows) for rows in documents]
            costs[0] += len(query.ids)  # the query runs with the part that holds the first item
            input_tokens = _text_tokens(documents) + len(query.ids)
            return Prepared(costs, (self.family, "score"), ScorePayload(query, documents), input_tokens=input_tokens)
        raise InvalidInput("This model supports encode and score.")

    # ---- forward (executor thread) --------------------------------------

    def _embed(self, rows: Sequence[Row]) -> list[torch.Tensor]:
        """Each row's vectors, its padding dropped: images and texts as two forwards."""
        out: list[torch.Tensor | None] = [None] * len(rows)
        for with_pixels in (True, False):
            chosen = [i for i, row in enumerate(rows) if (row.pixels is not None) == with_pixels]
            if chosen:
                for i, vectors in zip(chosen, self._run([rows[i] for i in chosen]), strict=True):
                    out[i] = vectors
        return [v for v in out if v is not None]

    def _run(self, rows: Sequence[Row]) -> list[torch.Tensor]:
        import torch

        width = max(len(row.ids) for row in rows)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            span = slice(width - len(row.ids), width) if self.left_padding else slice(0, len(row.ids))
            ids[i, span] = row.ids
            mask[i, span] = 1
        inputs: dict[str, torch.Tensor] = {
            "input_ids": torch.from_numpy(ids).to(self.device),
            "attention_mask": torch.from_numpy(mask).to(self.device),
        }
        if self.family == "colpali":
            # What the processor passes (all zero: every token in PaliGemma's prefix). Without
            # it a padded batch attends differently from the same rows one at a time.
            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        if rows[0].pixels is not None:
            inputs.update(self._pixel_inputs(rows))
        with torch.inference_mode():
            embeddings = self._call_model(inputs)
            if self.normalize:
                embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=-1)
            return [
                (embeddings[i, width - len(row.ids) :] if self.left_padding else embeddings[i, : len(row.ids)]).float()
                for i, row in enumerate(rows)
            ]

    def _call_model(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The model's ``(batch, sequence, dims)`` vectors for one padded batch."""
        if self.family == "colqwen2" and "image_grid_thw" in inputs:
            inputs["position_ids"] = self._image_positions(inputs)
        embeddings: torch.Tensor = self.model(**inputs, use_cache=False).embeddings
        return embeddings

    def _image_positions(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Qwen2-VL's rotary positions (2-D for the image tokens), as colpali-engine's ``ColQwen2``
        (the class the checkpoints were trained with) gives them: transformers'
        ``ColQwen2ForRetrieval`` passes its language model the embeddings alone, which then numbers
        image tokens as text. Padding-aware, so a row's answer does not depend on its batch."""
        import torch

        ids = inputs["input_ids"]
        image_tokens = (ids == int(self.model.config.vlm_config.image_token_id)).to(torch.int64)
        positions, _ = self.model.vlm.get_rope_index(
            ids,
            image_grid_thw=inputs["image_grid_thw"],
            attention_mask=inputs["attention_mask"],
            mm_token_type_ids=image_tokens,
        )
        result: torch.Tensor = positions
        return result

    def _pixel_inputs(self, rows: Sequence[Row]) -> dict[str, torch.Tensor]:
        import torch

        pixels = [row.pixels for row in rows if row.pixels is not None]
        if self.family == "colpali":
            return {"pixel_values": torch.from_numpy(np.stack(pixels)).to(self.device)}
        # ColQwen2ForRetrieval takes each image's patches padded to the longest, and the grids.
        longest = max(p.shape[0] for p in pixels)
        padded = np.zeros((len(pixels), longest, pixels[0].shape[1]), dtype=np.float32)
        for i, p in enumerate(pixels):
            padded[i, : p.shape[0]] = p
        grids = [row.grid for row in rows]
        return {
            "pixel_values": torch.from_numpy(padded).to(self.device),
            "image_grid_thw": torch.tensor(grids, dtype=torch.int64, device=self.device),
        }

    def _items(self, items: Sequence[Rows]) -> list[torch.Tensor]:
        """Each item's vectors: its rows' vectors one after the other."""
        return joined_per_item(self._embed([row for rows in items for row in rows]), [len(rows) for rows in items])

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        if isinstance(parts[0].prepared.payload, ScorePayload):
            return self._score(parts)
        items: list[Rows] = [rows for part in parts for rows in part.prepared.payload[part.start : part.stop]]
        vectors = [v.cpu().numpy() for v in self._items(items)]
        return split_by_parts([{"multivector": v} for v in vectors], parts)

    def _score(self, parts: Sequence[Part]) -> list[list[Any]]:
        payloads: list[ScorePayload] = [part.prepared.payload for part in parts]
        queries = self._embed([payload.query for payload in payloads])
        documents = self._items(
            [
                rows
                for part, payload in zip(parts, payloads, strict=True)
                for rows in payload.documents[part.start : part.stop]
            ]
        )
        per_part = split_by_parts(documents, parts)
        return [[maxsim(query, d) for d in docs] for query, docs in zip(queries, per_part, strict=True)]

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)


def _text_tokens(items: Sequence[Rows]) -> int:
    """Tokens of the items read as text (an item read as its images counts none)."""
    return sum(len(rows[0].ids) for rows in items if rows[0].pixels is None)
