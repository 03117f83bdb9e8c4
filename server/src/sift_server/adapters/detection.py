"""Zero-shot object detection on transformers' own classes: OWLv2
(``Owlv2ForObjectDetection``) and Grounding DINO (``GroundingDinoForObjectDetection``).

An item is an image (its text is not read); ``labels`` name what to find and each
item answers ``objects``: ``{label, score, bbox: [x, y, w, h]}`` in pixels of the
image as sent, as the reference server answers (docs/models.md, "Detection").

``prepare`` (the prep thread, where the service decoded the images) runs the
processor's PIL image path (no torchvision) per image; ``forward`` runs the model
once over the images of every request in the batch, then the processor's own
post-processing. Requests share a forward when they ask the same prompt (the
text tower's input). Grounding DINO's images run one model call per processed
size: its Swin backbone would read a smaller image's padding, so mixed sizes
would not answer as one image alone does. OWLv2 pads every image to its
square, so all its images share one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from sift_server.adapters._detection_rules import (
    GROUNDING_BOX_THRESHOLD,
    GROUNDING_TEXT_THRESHOLD,
    OWLV2_DEFAULT_SIDE,
    OWLV2_SCORE_THRESHOLD,
    canonical_label,
    detected_object,
    grounding_prompt,
    owl_queries,
    probability,
    shrunk_size,
)
from sift_server.adapters._extract_common import catalog_threshold, extract_item, resolve_labels
from sift_server.adapters._image_generation import first_images, only_images
from sift_server.adapters._lean_imports import recheck_hidden_packages
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, ExtractTask, LoadContext, Part, Prepared, TaskInput

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

Family = Literal["owlv2", "grounding-dino"]


@dataclass(frozen=True, slots=True)
class DetectionImage:
    """One item's image, processed: (3, height, width) float32, and the size sent."""

    pixels: np.ndarray
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class DetectionRequest:
    """A request's images and what its post-processing reads."""

    images: list[DetectionImage]
    labels: tuple[str, ...]
    # OWLv2: its queries; Grounding DINO: its one prompt.
    text: tuple[str, ...]
    threshold: float
    text_threshold: float


class _DetectionAdapter(Adapter):
    family: Family
    # OWLv2: longer sides above this are shrunk with PIL before the processor (the reference's step).
    max_side: int | None = None

    def __init__(self, model: Any, processor: Any, *, device: torch.device, threshold: float, text_threshold: float):
        self.model = model
        self.processor = processor
        self.image_processor = processor.image_processor
        self.tokenizer = processor.tokenizer
        self.device = device
        self.threshold = threshold
        self.text_threshold = text_threshold
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("image",),
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

    def _process(self, image: Image) -> DetectionImage:
        from PIL import Image as PILImage

        width, height = image.size
        size = shrunk_size(width, height, self.max_side)
        if size is not None:
            # reducing_gap: an integer box-reduce first, then Lanczos (what the reference does).
            image = image.resize(size, PILImage.Resampling.LANCZOS, reducing_gap=3.0)
        pixels = self.image_processor(images=image, return_tensors="np")["pixel_values"][0]
        return DetectionImage(np.asarray(pixels, dtype=np.float32), width, height)

    def _request(self, task: ExtractTask, text: tuple[str, ...], threshold: float, text_threshold: float) -> Prepared:
        images = [self._process(image) for image in first_images(task)]
        request = DetectionRequest(images, tuple(task.labels), text, threshold, text_threshold)
        # An image costs its processed pixels over 64 (what its vision tower reads grows with them).
        costs = [int(image.pixels.shape[1] * image.pixels.shape[2]) // 64 or 1 for image in images]
        return Prepared(item_costs=costs, compat_key=(self.family, text), payload=request)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        requests = [part.prepared.payload for part in parts]
        chosen = [
            (request, image)
            for request, part in zip(requests, parts, strict=True)
            for image in request.images[part.start : part.stop]
        ]
        results = self._detect(chosen)
        out: list[list[Any]] = []
        offset = 0
        for part in parts:
            size = part.stop - part.start
            out.append([extract_item() | {"objects": objects} for objects in results[offset : offset + size]])
            offset += size
        return out

    def _detect(self, chosen: list[tuple[DetectionRequest, DetectionImage]]) -> list[list[dict[str, Any]]]:
        raise NotImplementedError

    def _pixels(self, chosen: list[tuple[DetectionRequest, DetectionImage]]) -> torch.Tensor:
        import torch

        return torch.from_numpy(np.stack([image.pixels for _, image in chosen])).to(self.device)

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        release_module(self.model, self.device)


class Owlv2Adapter(_DetectionAdapter):
    """OWLv2: each label a query ``a photo of <label>``; options ``score_threshold``
    (or ``threshold``; catalog default 0.1)."""

    family: Family = "owlv2"

    def __init__(self, *args: Any, side: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The reference shrinks anything beyond twice OWLv2's square before processing.
        self.max_side = 2 * side

    @classmethod
    def load(cls, ctx: LoadContext) -> Owlv2Adapter:
        # Its image processor needs SciPy (checked when its module is imported, and at
        # every resize), which the lean import of transformers hid: look again first.
        recheck_hidden_packages()
        import torch
        from transformers import Owlv2ForObjectDetection, Owlv2Processor
        from transformers.models.owlv2.image_processing_pil_owlv2 import Owlv2ImageProcessorPil

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        threshold = catalog_threshold({"threshold": ctx.options.get("score_threshold")}, OWLV2_SCORE_THRESHOLD)
        image_processor = Owlv2ImageProcessorPil.from_pretrained(ctx.path, local_files_only=True)
        processor: Any = Owlv2Processor.from_pretrained(
            ctx.path, local_files_only=True, image_processor=image_processor
        )
        model: Any = Owlv2ForObjectDetection.from_pretrained(ctx.path, local_files_only=True, dtype=torch.float32)
        model.to(device).eval()
        size = image_processor.size or {}
        side = int(size.get("height") or OWLV2_DEFAULT_SIDE)
        return cls(
            model,
            processor,
            device=device,
            threshold=threshold if threshold is not None else OWLV2_SCORE_THRESHOLD,
            text_threshold=0.0,
            side=side,
        )

    def prepare(self, task: TaskInput) -> Prepared:
        task = only_images(task, "OWLv2")
        labels = resolve_labels(task)
        threshold = probability(task.options, ("score_threshold", "threshold"), self.threshold)
        return self._request(task, tuple(owl_queries(labels)), threshold, 0.0)

    def _detect(self, chosen: list[tuple[DetectionRequest, DetectionImage]]) -> list[list[dict[str, Any]]]:
        import torch

        queries = list(chosen[0][0].text)
        # Flat: every image's queries, one after another ([images × queries, length]).
        text = self.tokenizer(text=queries * len(chosen), return_tensors="pt", padding="max_length", truncation=True)
        with torch.inference_mode():
            outputs = self.model(
                pixel_values=self._pixels(chosen),
                input_ids=text["input_ids"].to(self.device),
                attention_mask=text["attention_mask"].to(self.device),
            )
        results: list[list[dict[str, Any]]] = []
        for index, (request, image) in enumerate(chosen):
            # Boxes are relative to the padded square, so scale by its side.
            side = max(image.width, image.height)
            one = _select(outputs, index)
            found = self.image_processor.post_process_object_detection(
                outputs=one, target_sizes=torch.tensor([(side, side)]), threshold=request.threshold
            )[0]
            labels = request.labels
            results.append(
                [
                    detected_object(labels[label] if label < len(labels) else f"class_{label}", score, box)
                    for box, score, label in zip(
                        found["boxes"].tolist(), found["scores"].tolist(), found["labels"].tolist(), strict=True
                    )
                ]
            )
        return results


class GroundingDinoAdapter(_DetectionAdapter):
    """Grounding DINO: one prompt ``label. label.`` (or the instruction); options
    ``box_threshold`` and ``text_threshold`` (catalog defaults 0.25 each)."""

    family: Family = "grounding-dino"

    @classmethod
    def load(cls, ctx: LoadContext) -> GroundingDinoAdapter:
        import torch
        from transformers import GroundingDinoForObjectDetection, GroundingDinoProcessor
        from transformers.models.grounding_dino.image_processing_pil_grounding_dino import (
            GroundingDinoImageProcessorPil,
        )

        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        box = catalog_threshold({"threshold": ctx.options.get("box_threshold")}, GROUNDING_BOX_THRESHOLD)
        text = catalog_threshold({"threshold": ctx.options.get("text_threshold")}, GROUNDING_TEXT_THRESHOLD)
        image_processor = GroundingDinoImageProcessorPil.from_pretrained(ctx.path, local_files_only=True)
        processor: Any = GroundingDinoProcessor.from_pretrained(
            ctx.path, local_files_only=True, image_processor=image_processor
        )
        model: Any = GroundingDinoForObjectDetection.from_pretrained(
            ctx.path, local_files_only=True, dtype=torch.float32
        )
        model.to(device).eval()
        return cls(
            model,
            processor,
            device=device,
            threshold=box if box is not None else GROUNDING_BOX_THRESHOLD,
            text_threshold=text if text is not None else GROUNDING_TEXT_THRESHOLD,
        )

    def prepare(self, task: TaskInput) -> Prepared:
        task = only_images(task, "Grounding DINO")
        prompt = grounding_prompt(task.labels, task.instruction)
        box = probability(task.options, ("box_threshold",), self.threshold)
        text = probability(task.options, ("text_threshold",), self.text_threshold)
        return self._request(task, (prompt,), box, text)

    def _detect(self, chosen: list[tuple[DetectionRequest, DetectionImage]]) -> list[list[dict[str, Any]]]:
        # One forward per processed size: the backbone would read a smaller image's padding.
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for index, (_, image) in enumerate(chosen):
            by_shape.setdefault(image.pixels.shape, []).append(index)
        results: list[list[dict[str, Any]]] = [[] for _ in chosen]
        for indices in by_shape.values():
            for index, found in zip(indices, self._detect_same_size([chosen[i] for i in indices]), strict=True):
                results[index] = found
        return results

    def _detect_same_size(self, chosen: list[tuple[DetectionRequest, DetectionImage]]) -> list[list[dict[str, Any]]]:
        import torch

        prompt = chosen[0][0].text[0]
        text = self.tokenizer([prompt] * len(chosen), return_tensors="pt", padding=True)
        pixels = self._pixels(chosen)
        mask = torch.ones((pixels.shape[0], pixels.shape[2], pixels.shape[3]), dtype=torch.long)
        with torch.inference_mode():
            outputs = self.model(
                pixel_values=pixels,
                pixel_mask=mask.to(self.device),
                input_ids=text["input_ids"].to(self.device),
                attention_mask=text["attention_mask"].to(self.device),
                token_type_ids=text["token_type_ids"].to(self.device),
            )
        results: list[list[dict[str, Any]]] = []
        for index, (request, image) in enumerate(chosen):
            found = self.processor.post_process_grounded_object_detection(
                _select(outputs, index),
                text["input_ids"][index : index + 1],
                threshold=request.threshold,
                text_threshold=request.text_threshold,
                target_sizes=[(image.height, image.width)],
            )[0]
            results.append(
                [
                    detected_object(canonical_label(phrase, request.labels), score, box)
                    for box, score, phrase in zip(
                        found["boxes"].tolist(), found["scores"].tolist(), found["text_labels"], strict=True
                    )
                ]
            )
        return results


def _select(outputs: Any, index: int) -> Any:
    """One image's logits and boxes (what post-processing reads), so that each
    request's thresholds apply to its own images."""
    from types import SimpleNamespace

    return SimpleNamespace(logits=outputs.logits[index : index + 1], pred_boxes=outputs.pred_boxes[index : index + 1])
