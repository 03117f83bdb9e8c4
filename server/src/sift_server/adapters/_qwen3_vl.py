"""What the Qwen3-VL embedder and reranker share: the folder check, the processor and
the model, loaded as the reference server loads them (transformers' own
``Qwen3VLForConditionalGeneration`` and ``Qwen3VLProcessor``, fp32 on the CPU, the
processor's pixel limits 256 × 28 × 28 to 1280 × 28 × 28 per image), and a padded batch
of prepared rows for one forward.

The processor is assembled from the folder's image processor, tokenizer and chat
template: transformers' loader also builds the video processor, which needs torchvision
(not a Sift dependency: its PyPI build is CUDA's); Sift reads no videos, so a bare video
processor stands in. Without torchvision the image processor is transformers' PIL
backend (the reference's torchvision backend resizes slightly differently).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import Part, Prepared

if TYPE_CHECKING:
    import torch

# The reference server's processor limits (pixels per image) for both models.
MIN_PIXELS = 256 * 28 * 28
MAX_PIXELS = 1280 * 28 * 28


def check_folder(path: Path, adapter: str) -> None:
    """Refuse what is not transformers' ``qwen3_vl`` checkpoint layout."""
    config_file = path / "config.json"
    if not config_file.is_file():
        raise UnservableModel("the folder has no config.json")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    model_type = config.get("model_type")
    if model_type != "qwen3_vl":
        raise UnservableModel(
            f"the {adapter} adapter serves transformers' Qwen3-VL checkpoints (model_type qwen3_vl), not {model_type!r}"
        )
    if config.get("auto_map"):
        raise UnservableModel(f"the {adapter} adapter runs transformers' own Qwen3-VL classes, not repository code")


def image_only_processor_class() -> Any:
    """``Qwen3VLProcessor`` that accepts a bare video processor (see the module docstring)."""
    from transformers import Qwen3VLProcessor
    from transformers.video_processing_utils import BaseVideoProcessor

    class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):  # type: ignore[misc]
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument_name == "video_processor" and isinstance(argument, BaseVideoProcessor):
                return type(argument)
            return super().check_argument_for_proper_class(argument_name, argument)

    return ImageOnlyQwen3VLProcessor


def _chat_template(folder: Path, tokenizer: Any) -> str:
    """The processor's chat template as transformers saves it, else the tokenizer's."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    legacy = folder / "chat_template.json"
    if legacy.is_file():
        template = json.loads(legacy.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, str):
            return template
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        raise UnservableModel(
            "the folder has no chat template (chat_template.jinja, chat_template.json or the tokenizer's)"
        )
    return template


def load_processor(processor_folder: Path, tokenizer_folder: Path) -> Any:
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil
    from transformers.video_processing_utils import BaseVideoProcessor

    config_file = processor_folder / "preprocessor_config.json"
    if not config_file.is_file():
        raise UnservableModel(f"{processor_folder} holds no image processor (preprocessor_config.json)")
    kind = str(json.loads(config_file.read_text(encoding="utf-8")).get("image_processor_type", ""))
    if not kind.startswith("Qwen2VLImageProcessor"):
        raise UnservableModel(f"Qwen3-VL's image processor is Qwen2VLImageProcessor, not {kind!r}")
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(
        processor_folder, local_files_only=True, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS
    )
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder, local_files_only=True)
    return image_only_processor_class()(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=BaseVideoProcessor(),
        chat_template=_chat_template(processor_folder, tokenizer),
    )


def load_model(path: Path, device: torch.device) -> Any:
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    return model.to(device).eval()


@dataclass(frozen=True, slots=True)
class Row:
    """One prompt for the model: its token ids and its images' patches and grids."""

    ids: list[int]
    pixels: np.ndarray | None = None
    grids: tuple[tuple[int, int, int], ...] = ()


class Encoder:
    """Turns a prompt and its images into a :class:`Row` (the processor's own call);
    the processor's tokenizer is not safe to share between threads."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.image_token_id = int(processor.image_token_id)
        tokenizer = processor.tokenizer
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        self._lock = threading.Lock()

    def prompt(self, conversation: list[dict[str, Any]]) -> str:
        with self._lock:
            text: str = self.processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        return text

    def offsets(self, expanded_prompt: str) -> list[tuple[int, int]]:
        """Each token's character span in a prompt whose image tokens are already expanded."""
        with self._lock:
            encoded = self.processor.tokenizer(expanded_prompt, return_offsets_mapping=True)
        return [(int(a), int(b)) for a, b in encoded["offset_mapping"]]

    def row(self, prompt: str, images: Sequence[Any]) -> Row:
        kwargs: dict[str, Any] = {"text": [prompt], "return_tensors": "np"}
        if images:
            kwargs["images"] = list(images)
        with self._lock:
            encoded = self.processor(**kwargs)
        ids = [int(i) for i in encoded["input_ids"][0]]
        if not images:
            return Row(ids)
        grids = tuple((int(t), int(h), int(w)) for t, h, w in encoded["image_grid_thw"])
        return Row(ids, np.asarray(encoded["pixel_values"], dtype=np.float32), grids)


def batch_inputs(rows: Sequence[Row], pad_id: int, image_token_id: int, device: torch.device) -> dict[str, Any]:
    """The model's inputs for ``rows`` padded on the left (the last position is every
    row's last token), their images' patches one after the other in row order."""
    import torch

    width = max(len(row.ids) for row in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, width - len(row.ids) :] = row.ids
        mask[i, width - len(row.ids) :] = 1
    input_ids = torch.from_numpy(ids).to(device)
    inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": torch.from_numpy(mask).to(device)}
    pixels = [row.pixels for row in rows if row.pixels is not None]
    if pixels:
        grids = [grid for row in rows for grid in row.grids]
        inputs["pixel_values"] = torch.from_numpy(np.concatenate(pixels)).to(device)
        inputs["image_grid_thw"] = torch.tensor(grids, dtype=torch.int64, device=device)
        # Where the image tokens are, as the processor marks them (1): the model's 3-D
        # rotary positions need it.
        inputs["mm_token_type_ids"] = (input_ids == image_token_id).to(torch.int32)
    return inputs


def prepared(adapter: str, rows: list[Row]) -> Prepared:
    """One request's rows as prepared work: each row costs its tokens; usage counts the
    tokens of the rows without images (the reference's count)."""
    text_tokens = sum(len(row.ids) for row in rows if row.pixels is None)
    return Prepared([len(row.ids) for row in rows], adapter, rows, input_tokens=text_tokens)


def part_inputs(parts: Sequence[Part], encoder: Encoder, device: torch.device) -> dict[str, Any]:
    """The model's inputs for the rows the parts hold, in order (``batch_inputs``)."""
    rows: list[Row] = [row for part in parts for row in part.prepared.payload[part.start : part.stop]]
    return batch_inputs(rows, encoder.pad_id, encoder.image_token_id, device)
