"""Run by the reference environment's Python (sie-server 0.10.1): the reference's own
``topk_embed`` adapter, loaded on the CPU in float32, answers the TopK-Embed parity cases
(tests/adapters/parity/topk_cases.py, passed as JSON on stdin) on a tiny folder. Prints the
answers as JSON. scripts/record_topk_parity.py runs it; nothing here is imported by Sift.

The adapter's page path imports torchvision for two calls: ``pil_to_tensor`` and a bicubic
``resize``. torchvision does not load beside the reference environment's CPU PyTorch, so
this driver gives the adapter those two calls only: ``pil_to_tensor`` (the image's RGB bytes
as a ``(3, h, w)`` uint8 tensor), and ``resize`` for the case the parity pages are in, a page
already at the size asked for, which torchvision 0.29's ``resize_image`` returns unchanged;
any other size stops the recording. For the same reason ``Qwen3VLProcessor.from_pretrained``
(whose video processor needs torchvision) is given the folder's processor built from its parts
with a bare video processor: the adapter reads only its tokenizer, its image processor's
settings and its chat template.
"""

from __future__ import annotations

import base64
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _identity_resize_only() -> None:
    def pil_to_tensor(image: Any) -> torch.Tensor:
        return torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()

    def resize(image: torch.Tensor, size: list[int], **_: Any) -> torch.Tensor:
        if list(image.shape[-2:]) != list(size):
            raise SystemExit(f"a parity page needs resizing ({tuple(image.shape[-2:])} -> {size}); choose another size")
        return image

    functional = types.ModuleType("torchvision.transforms.v2.functional")
    functional.pil_to_tensor = pil_to_tensor  # type: ignore[attr-defined]
    functional.resize = resize  # type: ignore[attr-defined]
    v2 = types.ModuleType("torchvision.transforms.v2")
    v2.InterpolationMode = types.SimpleNamespace(BICUBIC="bicubic")  # type: ignore[attr-defined]
    v2.functional = functional  # type: ignore[attr-defined]
    sys.modules["torchvision.transforms.v2"] = v2
    sys.modules["torchvision.transforms.v2.functional"] = functional


def _image_only_processor() -> None:
    import transformers
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil
    from transformers.video_processing_utils import BaseVideoProcessor

    class ImageOnly(transformers.Qwen3VLProcessor):  # type: ignore[misc,name-defined]
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument_name == "video_processor" and isinstance(argument, BaseVideoProcessor):
                return type(argument)
            return super().check_argument_for_proper_class(argument_name, argument)

        @classmethod
        def from_pretrained(cls, path: Any, **_: Any) -> Any:  # type: ignore[override]
            return cls(
                image_processor=Qwen2VLImageProcessorPil.from_pretrained(path),
                tokenizer=AutoTokenizer.from_pretrained(path),
                video_processor=BaseVideoProcessor(),
                chat_template=(Path(path) / "chat_template.jinja").read_text(encoding="utf-8"),
            )

    def built(_cls: Any, path: Any, **_: Any) -> Any:
        return ImageOnly.from_pretrained(path)

    transformers.Qwen3VLProcessor.from_pretrained = classmethod(built)


def _packed(vectors: np.ndarray) -> dict[str, Any]:
    array = np.ascontiguousarray(vectors, dtype="<f4")
    return {"shape": list(array.shape), "f32": base64.b64encode(array.tobytes()).decode("ascii")}


def main() -> None:
    from sie_server.adapters.topk_embed.adapter import TopkEmbedAdapter
    from sie_server.types.inputs import Item

    request = json.load(sys.stdin)
    folder = Path(request["folder"])
    images = [base64.b64decode(data) for data in request["images"]]
    torch.set_num_threads(1)
    _image_only_processor()
    adapter = TopkEmbedAdapter(folder, compute_precision="float32", packed=False)
    adapter.load("cpu")
    # The adapter's transformers imports are done: only now stand in for torchvision.
    _identity_resize_only()

    def item(spec: dict[str, Any]) -> Any:
        pages = [{"data": images[i], "format": "png"} for i in spec.get("images", [])]
        return Item(text=spec.get("text"), images=pages or None)

    embed = {}
    for case in request["embed_cases"]:
        output = adapter.encode(
            [item(spec) for spec in case["items"]],
            ["multivector"],
            is_query=case["is_query"],
            options=case["options"],
        )
        embed[case["name"]] = [_packed(np.asarray(v)) for v in output.multivector]
    score = {}
    for case in request["score_cases"]:
        scores = adapter.score(Item(text=case["query"]), [item(spec) for spec in case["items"]])
        score[case["name"]] = [float(value) for value in scores]
    # Each row alone: a batch's answer must not depend on what shares it.
    alone = {}
    for case in request["embed_cases"]:
        alone[case["name"]] = [
            _packed(np.asarray(adapter.encode([item(spec)], ["multivector"], is_query=case["is_query"],
                                              options=case["options"]).multivector[0]))
            for spec in case["items"]
        ]  # fmt: skip
    json.dump({"embed": embed, "score": score, "alone": alone}, sys.stdout)


if __name__ == "__main__":
    main()
