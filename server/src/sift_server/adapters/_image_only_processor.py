"""A vision-language processor of transformers' own class built from its parts with no
video processor: the class's ``from_pretrained`` also builds the video processor, which
asks for torchvision (not a Sift dependency: its PyPI build is CUDA's). Sift reads no
videos, so a bare ``BaseVideoProcessor`` stands in, and the image processor is
transformers' Pillow backend (the torchvision backend the reference loads by default
resizes slightly differently; docs/models.md, "OCR vision-language models")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sift_server.adapters._refusal import UnservableModel


def image_only(processor_class: Any) -> Any:
    """``processor_class`` that accepts a bare video processor."""
    from transformers.video_processing_utils import BaseVideoProcessor

    class ImageOnlyProcessor(processor_class):  # type: ignore[misc,valid-type]
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument_name == "video_processor" and isinstance(argument, BaseVideoProcessor):
                return type(argument)
            return super().check_argument_for_proper_class(argument_name, argument)

    ImageOnlyProcessor.__name__ = f"ImageOnly{processor_class.__name__}"
    return ImageOnlyProcessor


def load_image_only_processor(folder: Path, processor_class: Any, image_processor_class: Any, adapter: str) -> Any:
    """The folder's tokenizer, Pillow image processor and chat template in ``processor_class``."""
    from transformers import AutoTokenizer
    from transformers.video_processing_utils import BaseVideoProcessor

    if not (folder / "preprocessor_config.json").is_file():
        raise UnservableModel(
            f"{adapter} cannot serve {folder}: it holds no image processor (preprocessor_config.json)"
        )
    tokenizer: Any = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    template = tokenizer.chat_template
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        template = jinja.read_text(encoding="utf-8")
    if not isinstance(template, str) or not template:
        raise UnservableModel(f"{adapter} cannot serve {folder}: it has no chat template")
    return image_only(processor_class)(
        image_processor=image_processor_class.from_pretrained(folder, local_files_only=True),
        tokenizer=tokenizer,
        video_processor=BaseVideoProcessor(),
        chat_template=template,
    )
