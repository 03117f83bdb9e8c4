"""Image and text embeddings in one space: CLIP (``CLIPModel``) and SigLIP (``SiglipModel``).

Which one a folder holds is read from its ``config.json`` (``model_type``).
``prepare`` runs the model's own processor: an item with images becomes their
pixel values (the images arrive decoded to RGB by the service layer), any other
item its token ids. ``forward`` runs each tower once over the batch.

What a vector is, as the reference server makes it (so indexes built by either
server can be queried by the other; docs/models.md, "Images"):

- an item with images is encoded as its images; its text is ignored;
- each vector is L2-normalised (``normalize``, default true, also for SigLIP);
- an item with several images gets the mean of their normalised vectors, not
  normalised again;
- CLIP texts are cut at the tokenizer's limit (77) and padded to the longest of
  the batch; SigLIP texts are padded to ``max_sequence_length`` (default 64,
  never beyond what the text tower reads), as SigLIP was trained.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from sift_server.adapters._tokenize import pad_rows
from sift_server.adapters._torch_runtime import (
    configure_threads,
    module_bytes,
    release_module,
    select_device,
    tokenizer_limit,
)
from sift_server.adapters.base import Adapter, AdapterInfo, EncodeTask, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InputTooLong, InvalidInput
from sift_server.forward_io import split_by_parts

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

Family = Literal["clip", "siglip"]
# SigLIP's text context when the catalog does not say (what it was trained with).
SIGLIP_TEXT_LENGTH = 64


@dataclass(frozen=True, slots=True)
class Pixels:
    """An item encoded as its images: (n, 3, height, width) float32."""

    values: np.ndarray


@dataclass(frozen=True, slots=True)
class Tokens:
    """An item encoded as its text."""

    ids: list[int]
    mask: list[int]


def _family(folder_config: dict[str, Any]) -> Family:
    model_type = folder_config.get("model_type")
    if model_type == "clip":
        return "clip"
    if model_type == "siglip":
        return "siglip"
    raise ValueError(f"the clip adapter serves CLIP and SigLIP models (model_type clip or siglip), not {model_type!r}")


def _features(output: Any) -> torch.Tensor:
    """``get_*_features`` returns a tensor, or (transformers 5) an output whose pooler output is it."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    pooled = getattr(output, "pooler_output", None)
    if not isinstance(pooled, torch.Tensor):
        raise TypeError(f"unexpected features output {type(output).__name__}")
    return pooled


def _load_clip(ctx: LoadContext) -> tuple[Any, Any, int, int]:
    """Model, processor, dense width (the projection) and text limit (the tokenizer's, 77)."""
    import torch
    from transformers import CLIPModel, CLIPProcessor

    processor: Any = CLIPProcessor.from_pretrained(ctx.path, local_files_only=True)
    model: Any = CLIPModel.from_pretrained(ctx.path, local_files_only=True, dtype=torch.float32)
    return (
        model,
        processor,
        int(model.config.projection_dim),
        tokenizer_limit(processor.tokenizer, ctx.max_sequence_length),
    )


def _load_siglip(ctx: LoadContext) -> tuple[Any, Any, int, int]:
    """Model, processor, dense width (the vision tower's) and text context
    (``max_sequence_length``, else 64, within what the text tower reads)."""
    import torch
    from transformers import SiglipModel, SiglipProcessor

    # The PIL image processor, as the reference loads it (use_fast=False).
    processor: Any = SiglipProcessor.from_pretrained(ctx.path, local_files_only=True, use_fast=False)
    model: Any = SiglipModel.from_pretrained(ctx.path, local_files_only=True, dtype=torch.float32)
    positions = int(model.config.text_config.max_position_embeddings)
    length = tokenizer_limit(processor.tokenizer, ctx.max_sequence_length or SIGLIP_TEXT_LENGTH, positions)
    return model, processor, int(model.config.vision_config.hidden_size), length


class ClipAdapter(Adapter):
    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        family: Family,
        device: torch.device,
        normalize: bool,
        max_length: int,
        dims: int,
    ) -> None:
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.image_processor = processor.image_processor
        self.family = family
        self.device = device
        self.normalize = normalize
        self.max_length = max_length
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        vision = model.config.vision_config
        # An image's batch cost: the tokens its tower reads (patches and the class token).
        self.image_cost = (int(vision.image_size) // int(vision.patch_size)) ** 2 + 1
        self.info = AdapterInfo(
            tasks=frozenset({"encode"}),
            inputs=("text", "image"),
            outputs=("dense",),
            dims={"dense": dims},
            max_sequence_length=max_length,
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> ClipAdapter:
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        family = _family(json.loads((ctx.path / "config.json").read_text(encoding="utf-8")))
        model, processor, dims, max_length = (_load_clip if family == "clip" else _load_siglip)(ctx)
        model.to(device).eval()
        normalize = bool(ctx.options.get("normalize", True))
        return cls(
            model, processor, family=family, device=device, normalize=normalize, max_length=max_length, dims=dims
        )

    # ---- prepare (event loop, or the prep thread for images) ------------

    def _tokens(self, text: str, index: int, task: EncodeTask) -> Tokens:
        if task.overflow == "error" and len(self.tokenizer(text, truncation=False)["input_ids"]) > self.max_length:
            raise InputTooLong(
                f"Item {index} has more than {self.max_length} tokens (use overflow_policy 'truncate' to cut it)."
            )
        padding: str | bool = "max_length" if self.family == "siglip" else False
        encoded = self.tokenizer(text, truncation=True, max_length=self.max_length, padding=padding)
        ids = list(encoded["input_ids"])
        return Tokens(ids, list(encoded.get("attention_mask") or [1] * len(ids)))

    def _pixels(self, images: Sequence[Image]) -> Pixels:
        rows = [self.image_processor(images=image, return_tensors="np")["pixel_values"][0] for image in images]
        return Pixels(np.stack(rows).astype(np.float32, copy=False))

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, EncodeTask):
            raise InvalidInput("This model only supports encode.")
        payload: list[Pixels | Tokens] = []
        costs: list[int] = []
        text_tokens = 0
        for index, text in enumerate(task.texts):
            images = task.images[index] if task.images else ()
            if images:
                payload.append(self._pixels(images))
                costs.append(self.image_cost * len(images))
            else:
                tokens = self._tokens(text, index, task)
                payload.append(tokens)
                costs.append(len(tokens.ids))
                text_tokens += len(tokens.ids)
        return Prepared(item_costs=costs, compat_key=None, payload=payload, input_tokens=text_tokens)

    # ---- forward (executor thread) --------------------------------------

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        entries: list[Pixels | Tokens] = [e for part in parts for e in part.prepared.payload[part.start : part.stop]]
        images = [(i, e) for i, e in enumerate(entries) if isinstance(e, Pixels)]
        texts = [(i, e) for i, e in enumerate(entries) if isinstance(e, Tokens)]
        vectors: list[np.ndarray | None] = [None] * len(entries)
        # Each tower runs once over the batch: all its images, then all its texts.
        if images:
            for (i, _), vector in zip(images, self._images([e for _, e in images]), strict=True):
                vectors[i] = vector
        if texts:
            for (i, _), vector in zip(texts, self._texts([e for _, e in texts]), strict=True):
                vectors[i] = vector
        return split_by_parts(vectors, parts)

    def _images(self, items: Sequence[Pixels]) -> list[np.ndarray]:
        import torch

        pixel_values = torch.from_numpy(np.concatenate([item.values for item in items])).to(self.device)
        with torch.inference_mode():
            features = _features(self.model.get_image_features(pixel_values=pixel_values))
            if self.normalize:
                features = torch.nn.functional.normalize(features, p=2, dim=-1)
            out: list[np.ndarray] = []
            offset = 0
            for item in items:
                count = item.values.shape[0]
                group = features[offset : offset + count]
                offset += count
                # Several images: the mean of their (normalised) vectors, not normalised again.
                vector = group[0] if count == 1 else group.mean(dim=0)
                out.append(vector.float().cpu().numpy())
        return out

    def _texts(self, items: Sequence[Tokens]) -> list[np.ndarray]:
        import torch

        padded_ids, padded_mask = pad_rows([item.ids for item in items], self.pad_id, [item.mask for item in items])
        ids, mask = torch.from_numpy(padded_ids), torch.from_numpy(padded_mask)
        with torch.inference_mode():
            features = _features(
                self.model.get_text_features(input_ids=ids.to(self.device), attention_mask=mask.to(self.device))
            )
            if self.normalize:
                features = torch.nn.functional.normalize(features, p=2, dim=-1)
            matrix = features.float().cpu().numpy()
        return list(matrix)

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)
