"""SAM 3 text-prompted detection on transformers' own ``Sam3Model``, answered as
the reference server's ``sam3`` adapter answers (docs/models.md, "Detection").

An item is an image (its text is not read); each label is one concept prompt and
each item answers ``objects``: ``{label, score, bbox: [x, y, w, h]}`` in pixels of
the image as sent, highest score first. A score is sigmoid(query logit) ×
sigmoid(presence logit); a box is kept when its score is strictly above the
threshold. Masks are not returned, so the mask decoder never runs.

``Sam3ImageProcessor`` is a torchvision class (its module imports torchvision),
which does not import beside this project's CPU torch; ``sam3_pixels`` does what
it does to one image with torch's own operators: the uint8 image resized by
``interpolate`` (bilinear, antialiased: the kernel torchvision calls, on uint8
where torchvision does so), then rescaled and normalised in one step as the
processor fuses them. ``prepare`` (the prep thread) does that per image;
``forward`` runs the vision tower once over the images of every request in the
batch (requests share a forward whatever their labels: the vision tower does not
read them), then the detector per (image, label) pair, as the reference does.
"""

from __future__ import annotations

import json
import platform
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sift_server.adapters._chat_ocr import load_checked
from sift_server.adapters._detection_rules import probability, shrunk_size
from sift_server.adapters._extract_common import catalog_threshold, extract_item, resolve_labels
from sift_server.adapters._image_generation import catalog_count, first_images, only_images
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._sam3_rules import (
    SAM3_MODEL_TYPES,
    SAM3_SCORE_THRESHOLD,
    Sam3Pixels,
    by_score,
    label_prompts,
    read_pixels_config,
    sam3_object,
)
from sift_server.adapters._torch_runtime import configure_threads, module_bytes, release_module, select_device
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InvalidInput

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

# The processor pads every prompt to this many tokens (Sam3Processor's text call).
PROMPT_TOKENS = 32
# Prompt encodings kept between requests (labels repeat across requests).
_TEXT_CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class Sam3Image:
    """One item's image, processed ((3, height, width) float32), and the size sent."""

    pixels: torch.Tensor
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class Sam3Prompt:
    """A distinct prompt: the caller's label and the tokenizer's ids and mask."""

    label: str
    input_ids: tuple[int, ...]
    attention_mask: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Sam3Request:
    images: list[Sam3Image]
    prompts: tuple[Sam3Prompt, ...]
    threshold: float


def _uint8_resize_is_native() -> bool:
    """Whether torchvision resizes a uint8 image bilinearly without going through
    float32 (it does where torch has its vectorised uint8 kernel)."""
    import torch

    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") or platform.machine() in (
        "aarch64",
        "arm64",
    )


def sam3_pixels(image: Image, spec: Sam3Pixels) -> torch.Tensor:
    """``Sam3ImageProcessor``'s pixel values for one RGB image ((3, height, width)
    float32), computed with the operators its torchvision backend calls."""
    import numpy as np
    import torch
    from torch.nn.functional import interpolate

    width, height = image.size
    # pil_to_tensor: an (H, W, C) array viewed as (C, H, W); the processor adds the batch axis.
    tensor = torch.as_tensor(np.array(image, copy=True)).view(height, width, 3).permute(2, 0, 1).unsqueeze(0)
    if (spec.height, spec.width) != (height, width):
        strides = tensor.stride()
        numel = tensor.numel()
        if tensor.is_contiguous(memory_format=torch.channels_last) and numel != strides[0]:
            # torchvision restrides a channels-last batch of one so interpolate keeps the format.
            tensor = tensor.as_strided((1, 3, height, width), [numel, *strides[1:]])
        native = _uint8_resize_is_native()
        if not native:
            tensor = tensor.to(dtype=torch.float32)
        tensor = interpolate(
            tensor, size=[spec.height, spec.width], mode="bilinear", align_corners=False, antialias=True
        )
        if not native:
            tensor = tensor.round_().to(dtype=torch.uint8)
    # Rescale and normalise fused: (x - mean / rescale) / (std / rescale), in float32.
    mean = torch.tensor(spec.image_mean) * (1.0 / spec.rescale_factor)
    std = torch.tensor(spec.image_std) * (1.0 / spec.rescale_factor)
    out = tensor.to(dtype=torch.float32)
    out = out.sub(mean.to(torch.float32).view(-1, 1, 1)).div_(std.to(torch.float32).view(-1, 1, 1))
    return out[0]


def _no_masks() -> torch.nn.Module:
    """A module to stand in for ``Sam3Model.mask_decoder``: masks are not returned, so
    they are not computed. ``Sam3Model.forward`` calls it after the boxes, logits and
    presence scores are final, so they do not change."""
    import torch

    class NoMasks(torch.nn.Module):
        def forward(self, *args: Any, **kwargs: Any) -> SimpleNamespace:
            del args, kwargs
            return SimpleNamespace(pred_masks=None, semantic_seg=None, attentions=None)

    return NoMasks()


class Sam3Adapter(Adapter):
    """SAM 3: each label a concept prompt; options ``score_threshold`` (or
    ``threshold``; catalog default 0.3)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        pixels: Sam3Pixels,
        device: torch.device,
        threshold: float,
        pairs_per_forward: int,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.pixels = pixels
        self.device = device
        self.threshold = threshold
        self.pairs_per_forward = pairs_per_forward
        positions = getattr(model.config.text_config, "max_position_embeddings", None)
        self.text_positions = positions if isinstance(positions, int) and positions > 0 else PROMPT_TOKENS
        # The reference's pre-shrink: anything beyond twice the processor's side (its height).
        self.max_side = 2 * pixels.height
        self._text_cache: OrderedDict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor] = OrderedDict()
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}),
            inputs=("image",),
            runtime={"backend": "torch", "precision": "fp32", "device": str(device)},
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> Sam3Adapter:
        from transformers import AutoTokenizer, Sam3Model

        config_file = ctx.path / "config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        if config.get("model_type") not in SAM3_MODEL_TYPES:
            raise UnservableModel(
                f"sam3 cannot serve {ctx.path}: its config.json is model_type {config.get('model_type')!r}, "
                f"not one of {list(SAM3_MODEL_TYPES)}."
            )
        pixels = read_pixels_config(ctx.path)
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        threshold = catalog_threshold({"threshold": ctx.options.get("score_threshold")}, SAM3_SCORE_THRESHOLD)
        pairs = catalog_count(ctx.options, "max_pairs_per_forward", 1)
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        detector = config.get("detector_config") or config
        positions = (detector.get("text_config") or {}).get("max_position_embeddings", PROMPT_TOKENS)
        if not isinstance(positions, int) or positions < PROMPT_TOKENS:
            # The processor pads every prompt to 32 tokens: no prompt would fit (the reference answers 400s).
            raise UnservableModel(
                f"sam3 cannot serve {ctx.path}: its text tower has {positions!r} positions, "
                f"fewer than the {PROMPT_TOKENS} every prompt is padded to."
            )
        model: Any = load_checked(Sam3Model, ctx.path, "sam3")
        model.mask_decoder = _no_masks()
        model.to(device).eval()
        return cls(
            model,
            tokenizer,
            pixels=pixels,
            device=device,
            threshold=threshold if threshold is not None else SAM3_SCORE_THRESHOLD,
            pairs_per_forward=pairs,
        )

    def prepare(self, task: TaskInput) -> Prepared:
        task = only_images(task, "SAM 3")
        labels = resolve_labels(task)
        threshold = probability(task.options, ("score_threshold", "threshold"), self.threshold)
        prompts = self._prompts(labels)
        images = [self._process(image) for image in first_images(task)]
        request = Sam3Request(images, prompts, threshold)
        # An image costs its processed pixels over 64 (what its vision tower reads grows with them).
        cost = (self.pixels.height * self.pixels.width) // 64 or 1
        return Prepared(item_costs=[cost] * len(images), compat_key=("sam3",), payload=request)

    def _prompts(self, labels: Sequence[str]) -> tuple[Sam3Prompt, ...]:
        """One prompt per distinct token sequence: the tokenizer lowercases, so labels
        that differ only in case are one prompt, answered with the first of them."""
        prompts: list[Sam3Prompt] = []
        seen: set[tuple[int, ...]] = set()
        for label, prompt in label_prompts(labels):
            encoded = self.tokenizer(prompt, padding="max_length", max_length=PROMPT_TOKENS)
            ids = tuple(int(token) for token in encoded["input_ids"])
            mask = tuple(int(bit) for bit in encoded["attention_mask"])
            if len(ids) > self.text_positions:
                raise InvalidInput(
                    f"SAM 3 label {label!r} is {sum(mask)} tokens; the text encoder takes at most "
                    f"{self.text_positions}. Use a short noun phrase."
                )
            key = tuple(token for token, bit in zip(ids, mask, strict=True) if bit)
            if key in seen:
                continue
            seen.add(key)
            prompts.append(Sam3Prompt(label, ids, mask))
        return tuple(prompts)

    def _process(self, image: Image) -> Sam3Image:
        from PIL import Image as PILImage

        width, height = image.size
        size = shrunk_size(width, height, self.max_side)
        if size is not None:
            # reducing_gap: an integer box-reduce first, then Lanczos (what the reference does).
            image = image.resize(size, PILImage.Resampling.LANCZOS, reducing_gap=3.0)
        return Sam3Image(sam3_pixels(image, self.pixels), width, height)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        chosen = [
            (part.prepared.payload, image)
            for part in parts
            for image in part.prepared.payload.images[part.start : part.stop]
        ]
        results = self._detect(chosen)
        out: list[list[Any]] = []
        offset = 0
        for part in parts:
            size = part.stop - part.start
            out.append([extract_item() | {"objects": objects} for objects in results[offset : offset + size]])
            offset += size
        return out

    def _detect(self, chosen: list[tuple[Sam3Request, Sam3Image]]) -> list[list[dict[str, Any]]]:
        import torch

        model = self.model
        with torch.inference_mode():
            pixels = torch.stack([image.pixels for _, image in chosen]).to(self.device)
            vision = model.get_vision_features(pixel_values=pixels)
            # The detector reads one FPN level: the last one Sam3Model.forward keeps.
            features = vision.fpn_hidden_states[:-1][-1]
            positions = vision.fpn_position_encoding[:-1][-1]
            vision_output = type(vision)
            pairs = [(index, prompt) for index, (request, _) in enumerate(chosen) for prompt in request.prompts]
            kept: list[list[dict[str, Any]]] = [[] for _ in chosen]
            for start in range(0, len(pairs), self.pairs_per_forward):
                chunk = pairs[start : start + self.pairs_per_forward]
                rows = torch.tensor([index for index, _ in chunk], device=self.device)
                text = torch.cat([self._text_embedding(prompt) for _, prompt in chunk])
                mask = torch.tensor([prompt.attention_mask for _, prompt in chunk], device=self.device)
                outputs = model(
                    vision_embeds=vision_output(
                        fpn_hidden_states=(features[rows], None), fpn_position_encoding=(positions[rows], None)
                    ),
                    text_embeds=SimpleNamespace(pooler_output=text),
                    attention_mask=mask,
                )
                scores = outputs.pred_logits.float().sigmoid()
                if outputs.presence_logits is not None:
                    scores = scores * outputs.presence_logits.float().sigmoid()
                scale = torch.tensor(
                    [[chosen[i][1].width, chosen[i][1].height] * 2 for i, _ in chunk],
                    dtype=torch.float32,
                    device=self.device,
                )
                boxes = outputs.pred_boxes.float() * scale.unsqueeze(1)
                for row, (index, prompt) in enumerate(chunk):
                    request, image = chosen[index]
                    keep = scores[row] > request.threshold
                    for score, box in zip(
                        scores[row][keep].cpu().tolist(), boxes[row][keep].cpu().tolist(), strict=True
                    ):
                        kept[index].append(sam3_object(prompt.label, score, box, image.width, image.height))
        return [by_score(objects) for objects in kept]

    def _text_embedding(self, prompt: Sam3Prompt) -> torch.Tensor:
        """The text tower's output for one prompt ([1, tokens, hidden]), cached by its ids and mask."""
        import torch

        key = (prompt.input_ids, prompt.attention_mask)
        cached = self._text_cache.get(key)
        if cached is not None:
            self._text_cache.move_to_end(key)
            return cached
        encoded: torch.Tensor = self.model.get_text_features(
            input_ids=torch.tensor([prompt.input_ids], device=self.device),
            attention_mask=torch.tensor([prompt.attention_mask], device=self.device),
            return_dict=True,
        ).pooler_output
        self._text_cache[key] = encoded
        if len(self._text_cache) > _TEXT_CACHE_SIZE:
            self._text_cache.popitem(last=False)
        return encoded

    def memory_bytes(self) -> int:
        return module_bytes(self.model)

    def close(self) -> None:
        self._text_cache.clear()
        release_module(self.model, self.device)
