"""ColPali-family retrievers in colpali-engine's own layout: a PEFT LoRA adapter folder
over a base checkpoint, served with colpali-engine's model class (``vidore/colqwen2.5-v0.2``:
``ColQwen2_5``, a Qwen2.5-VL backbone, here; ``vidore/colSmol-256M``: ``ColIdefics3``, an
Idefics3 backbone, ``ColIdefics3Adapter`` below, to which ``load`` hands an Idefics3 base).

What a vector is, as colpali-engine's processor and model make it (and the reference server,
which runs its own copy of that class, for ``vidore/colqwen2.5-v0.2``):

- an image is colpali-engine's visual prompt with the image's tokens, its pixels resized
  within the processor's bounds (``min_pixels``/``max_pixels``: the reference's are the
  entry's options); a text is the query: the text and ten ``<|endoftext|>`` augmentation
  tokens, no prefix;
- every token yields a vector (the model's own projection, L2-normalised; ``normalize``
  normalises again), padding none; an item's several images give their vectors in turn.

Everything else (items, score, costs, limits) is the ``colpali`` adapter's.

colpali-engine is installed without its dependencies (the ``colvision`` extra brings what it
needs): it asks for torchvision, whose PyPI build does not load beside this project's CPU
torch. Two consequences, handled here: colpali-engine's package imports ``smart_resize``
from transformers' torchvision image-processor module (transformers' Pillow module defines
the same function; it is aliased for that import only), and its processor class cannot be
built (transformers' Qwen2-VL processor insists on a video processor, which needs
torchvision). The inputs are therefore built from the same pieces colpali-engine's processor
calls: the folder's tokenizer, transformers' Qwen2-VL image processor (its Pillow backend),
and the visual prompt, augmentation token and query prefix read from colpali-engine's class.

colSmol (``vidore/colSmol-256M``): colpali-engine's ``ColIdefics3`` (an Idefics3 / SmolVLM
backbone and a 128-wide projection) with its LoRA, served by the ``colpali-engine`` adapter.

What a vector is, as colpali-engine's ``ColIdefics3Processor`` and the reference server make it:

- a page is colpali-engine's visual prompt (``<|im_start|>User:<image>Describe the
  image.<end_of_utterance>\\nAssistant:``) with the page's image tokens: the page resized so its
  longest edge is the processor's ``size``, split into tiles of ``max_image_size`` (each with
  its row/column token) plus the whole page as one more tile, ``image_seq_len`` tokens a tile;
- a text is the text and ten ``<end_of_utterance>`` augmentation tokens, no prefix;
- the LoRA is merged into the base, as the reference merges it.

transformers' Idefics3 image processors are found by their public names only with torchvision
(which does not load beside this project's CPU torch), and colpali-engine's processor is built
through them; the processor is therefore built from its parts: transformers' ``Idefics3Processor``
(the class colpali-engine's subclasses, whose call it makes) over the folder's tokenizer and
transformers' Pillow Idefics3 image processor, read from its module. Where a page is resized
(always, for Idefics3) Pillow's resampling differs slightly from torchvision's: docs/models.md
("Document-image retrievers") gives the measured difference.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, select_device
from sift_server.adapters.base import LoadContext
from sift_server.adapters.colpali import DEFAULT_MAX_LENGTH, ColPaliAdapter, Family, Row

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

# The base architectures served, by the base folder's ``model_type``.
_SERVED_BASES = {"qwen2_5_vl": "ColQwen2_5", "idefics3": "ColIdefics3"}
_TORCHVISION_MODULE = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
_PILLOW_MODULE = "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl"


@contextlib.contextmanager
def _importable_colpali_engine() -> Iterator[None]:
    """Let colpali-engine's package import without torchvision (see the module doc)."""
    if importlib.util.find_spec("torchvision") is not None or _TORCHVISION_MODULE in sys.modules:
        yield
        return
    sys.modules[_TORCHVISION_MODULE] = importlib.import_module(_PILLOW_MODULE)
    try:
        yield
    finally:
        sys.modules.pop(_TORCHVISION_MODULE, None)


def colpali_engine_models() -> Any:
    with _importable_colpali_engine():
        return importlib.import_module("colpali_engine.models")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise UnservableModel(f"the folder has no {what} ({path.name})")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _base_folder(ctx: LoadContext, adapter_config: Mapping[str, Any]) -> Path:
    """The base checkpoint: ``options.base`` (a folder, relative to the adapter's, or a hub
    repository at a pinned revision, fetched like the entry's own source), else the adapter's
    ``base_model_name_or_path`` when it is a local folder."""
    base = ctx.options.get("base")
    if isinstance(base, Mapping):
        if base.get("path"):
            folder = Path(str(base["path"]))
            return folder if folder.is_absolute() else ctx.path / folder
        if base.get("hf"):
            from huggingface_hub import snapshot_download

            revision = base.get("revision")
            return Path(snapshot_download(str(base["hf"]), revision=str(revision) if revision else None))
        raise UnservableModel("options.base needs 'path' or 'hf' (with 'revision')")
    if base is not None:
        raise UnservableModel("options.base must be a mapping ({path: ...} or {hf: ..., revision: ...})")
    named = str(adapter_config.get("base_model_name_or_path") or "")
    if named and Path(named).is_dir():
        return Path(named)
    raise UnservableModel(
        f"the adapter's base {named!r} is not a local folder: set options.base "
        "({hf: <repository>, revision: <commit>} or {path: <folder>})"
    )


def _check_layout(ctx: LoadContext) -> tuple[Path, str]:
    """The base folder and colpali-engine's class for it, or a refusal saying why."""
    adapter_config = _read_json(ctx.path / "adapter_config.json", "PEFT adapter config")
    if adapter_config.get("peft_type") != "LORA":
        raise UnservableModel(f"the adapter is {adapter_config.get('peft_type')!r}, not a LoRA")
    base = _base_folder(ctx, adapter_config)
    model_type = _read_json(base / "config.json", "base config").get("model_type")
    if model_type not in _SERVED_BASES:
        raise UnservableModel(
            f"the colpali-engine adapter serves bases of type {sorted(_SERVED_BASES)} (colSmol, ColQwen2.5), "
            f"not {model_type!r}"
        )
    return base, _SERVED_BASES[model_type]


def _load_lora(model: Any, model_class: Any, folder: Path) -> None:
    """Apply the folder's LoRA, its weight names read as colpali-engine's ``from_pretrained``
    reads the checkpoint's (the published adapters name the language model ``model.*``,
    transformers 5 ``language_model.*``); without the renaming the LoRA would silently not apply."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.modeling_utils import LoadStateDictConfig

    key_mapping = dict(getattr(super(model_class, model), "_checkpoint_conversion_mapping", {}))
    key_mapping.update(model_class._checkpoint_conversion_mapping)
    mapping = get_model_conversion_mapping(model, key_mapping=key_mapping)
    model.load_adapter(str(folder), load_config=LoadStateDictConfig(weight_mapping=mapping))


class ColVisionAdapter(ColPaliAdapter):
    """ColQwen2.5 through colpali-engine's ``ColQwen2_5``; the rest as ``ColPaliAdapter``."""

    query_prefix = ""
    augmentation = ""

    @classmethod
    def load(cls, ctx: LoadContext) -> ColVisionAdapter:
        import torch
        from transformers import AutoTokenizer, ColQwen2Processor, Qwen2VLImageProcessor

        base, class_name = _check_layout(ctx)
        if class_name == "ColIdefics3":
            return ColIdefics3Adapter.build(ctx, base)
        models = colpali_engine_models()
        model_class = getattr(models, class_name)
        processor_class = getattr(models, f"{class_name}_Processor")
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        tokenizer.padding_side = "left"  # as colpali-engine's processor sets it
        bounds = {key: int(ctx.options[key]) for key in ("min_pixels", "max_pixels") if ctx.options.get(key)}
        image_processor = Qwen2VLImageProcessor.from_pretrained(ctx.path, local_files_only=True, **bounds)
        # transformers' ColQwen2 processor expands an image's prompt exactly as Qwen2-VL's does;
        # the prompt is colpali-engine's. Queries are tokenised below, without its prefix.
        processor = ColQwen2Processor(
            image_processor=image_processor,
            tokenizer=tokenizer,
            visual_prompt_prefix=processor_class.visual_prompt_prefix,
        )
        model = model_class.from_pretrained(base, local_files_only=True, dtype=torch.float32)
        _load_lora(model, model_class, ctx.path)
        model.to(device).eval()
        adapter = cls.assembled(ctx, model, processor, processor_class, family="colqwen2_5", device=device)
        adapter.image_token_id = int(model.config.image_token_id)
        return adapter

    image_token_id = -1

    @classmethod
    def assembled(
        cls, ctx: LoadContext, model: Any, processor: Any, processor_class: Any, *, family: Family, device: Any
    ) -> Self:
        """The adapter over a loaded model and processor, with the catalog entry's settings and
        colpali-engine's query format (its prefix and ten augmentation tokens)."""
        adapter = cls(
            model,
            processor,
            family=family,
            device=device,
            normalize=bool(ctx.options.get("normalize", True)),
            max_length=int(ctx.max_sequence_length or DEFAULT_MAX_LENGTH),
            dims=int(model.dim),
        )
        adapter.query_prefix = processor_class.query_prefix
        adapter.augmentation = processor_class.query_augmentation_token * 10
        return adapter

    def _query_ids(self, text: str) -> list[int]:
        with self._lock:
            encoded = self.processor.tokenizer([self.query_prefix + text + self.augmentation], return_tensors="np")
        return [int(i) for i in encoded["input_ids"][0]]

    def _call_model(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        import torch

        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        if "pixel_values" in inputs:
            # What Qwen2-VL's processor returns beside the ids: where the image tokens are, from
            # which the model builds the image's 2-D rotary positions (padding-aware).
            inputs["mm_token_type_ids"] = (ids == self.image_token_id).to(torch.int64)
        else:
            # A text's positions count from its first token, padding or not (the model's default
            # counts the padding): each row is answered as if alone, as the reference does.
            positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
            inputs["position_ids"] = positions.unsqueeze(0).expand(3, -1, -1)
        embeddings: torch.Tensor = self.model(**inputs)
        return embeddings


# Idefics3Processor's own default, used where the folder's processor settings name none.
_DEFAULT_IMAGE_SEQ_LEN = 169


def _image_seq_len(folder: Path) -> int:
    config = folder / "processor_config.json"
    if not config.is_file():
        return _DEFAULT_IMAGE_SEQ_LEN
    return int(json.loads(config.read_text(encoding="utf-8")).get("image_seq_len", _DEFAULT_IMAGE_SEQ_LEN))


def merged_lora_model(model: Any, folder: Path) -> Any:
    """The folder's LoRA merged into ``model`` (PEFT's ``merge_and_unload``, as the reference
    does); refused when a weight of the adapter finds no place in the model, which PEFT would
    only warn about."""
    from peft import PeftConfig, PeftModel
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    peft_model = PeftModel(model, PeftConfig.from_pretrained(str(folder)))
    result: Any = set_peft_model_state_dict(peft_model, load_peft_weights(str(folder), device="cpu"))
    unplaced = list(result.unexpected_keys) + [key for key in result.missing_keys if "lora_" in key]
    if unplaced:
        raise UnservableModel(f"the LoRA does not fit the base model: {unplaced[:3]} ({len(unplaced)} weights)")
    return peft_model.merge_and_unload()


class ColIdefics3Adapter(ColVisionAdapter):
    """colSmol through colpali-engine's ``ColIdefics3``; the rest as ``ColVisionAdapter``."""

    visual_prompt = ""

    @classmethod
    def build(cls, ctx: LoadContext, base: Path) -> ColIdefics3Adapter:
        import torch
        from transformers import AutoTokenizer, Idefics3Processor
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

        models = colpali_engine_models()
        processor_class = models.ColIdefics3Processor
        configure_threads(ctx.torch_threads)
        device = select_device(ctx.options)
        tokenizer = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        tokenizer.padding_side = "left"  # as colpali-engine's processor sets it
        processor = Idefics3Processor(
            image_processor=Idefics3ImageProcessorPil.from_pretrained(ctx.path, local_files_only=True),
            tokenizer=tokenizer,
            image_seq_len=_image_seq_len(ctx.path),
        )
        model = models.ColIdefics3.from_pretrained(base, local_files_only=True, dtype=torch.float32)
        model = merged_lora_model(model, ctx.path)
        model.to(device).eval()
        adapter = cls.assembled(ctx, model, processor, processor_class, family="colidefics3", device=device)
        adapter.visual_prompt = processor_class.visual_prompt_prefix
        return adapter

    def _image(self, image: Image) -> Row:
        with self._lock:
            encoded = self.processor(text=[self.visual_prompt], images=[[image]], return_tensors="np")
        ids = [int(i) for i in encoded["input_ids"][0]]
        pixels = np.asarray(encoded["pixel_values"][0], dtype=np.float32)
        return Row(ids, pixels, pixel_mask=np.asarray(encoded["pixel_attention_mask"][0], dtype=np.int64))

    def _pixel_inputs(self, rows: Sequence[Row]) -> dict[str, torch.Tensor]:
        """The pages' tiles padded to the most tiles (all-zero tiles, which the model drops, as
        the processor pads a batch), with their pixel masks."""
        import torch

        tiles = [row for row in rows if row.pixels is not None and row.pixel_mask is not None]
        most = max(row.pixels.shape[0] for row in tiles if row.pixels is not None)
        height = max(row.pixels.shape[2] for row in tiles if row.pixels is not None)
        width = max(row.pixels.shape[3] for row in tiles if row.pixels is not None)
        pixels = np.zeros((len(tiles), most, 3, height, width), dtype=np.float32)
        masks = np.zeros((len(tiles), most, height, width), dtype=np.int64)
        for i, row in enumerate(tiles):
            assert row.pixels is not None and row.pixel_mask is not None
            n, _, h, w = row.pixels.shape
            pixels[i, :n, :, :h, :w] = row.pixels
            masks[i, :n, :h, :w] = row.pixel_mask
        return {
            "pixel_values": torch.from_numpy(pixels).to(self.device),
            "pixel_attention_mask": torch.from_numpy(masks).to(self.device),
        }

    def _call_model(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        # Positions count from each row's first token, padding or not (the model's default counts
        # the padding): a row is answered as if alone, as a one-item request to the reference.
        mask = inputs["attention_mask"]
        inputs["position_ids"] = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        embeddings: torch.Tensor = self.model(**inputs, use_cache=False)
        return embeddings
