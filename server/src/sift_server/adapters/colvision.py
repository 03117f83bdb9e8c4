"""ColPali-family retrievers in colpali-engine's own layout: a PEFT LoRA adapter folder
over a base checkpoint, served with colpali-engine's model class (``vidore/colqwen2.5-v0.2``:
``ColQwen2_5``, a Qwen2.5-VL backbone).

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
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters._torch_runtime import configure_threads, select_device
from sift_server.adapters.base import LoadContext
from sift_server.adapters.colpali import DEFAULT_MAX_LENGTH, ColPaliAdapter

if TYPE_CHECKING:
    import torch

# The base architectures served, by the base folder's ``model_type``.
_SERVED_BASES = {"qwen2_5_vl": "ColQwen2_5"}
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
            f"the colpali-engine adapter serves bases of type {sorted(_SERVED_BASES)} (ColQwen2.5), not {model_type!r}"
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
        adapter = cls(
            model,
            processor,
            family="colqwen2_5",
            device=device,
            normalize=bool(ctx.options.get("normalize", True)),
            max_length=int(ctx.max_sequence_length or DEFAULT_MAX_LENGTH),
            dims=int(model.dim),
        )
        adapter.query_prefix = processor_class.query_prefix
        adapter.augmentation = processor_class.query_augmentation_token * 10
        adapter.image_token_id = int(model.config.image_token_id)
        return adapter

    image_token_id = -1

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
