"""Record the Qwen3-VL parity fixture once (tests/adapters/parity/qwen3_vl_reference.json).

Every answer comes from transformers' own ``Qwen3VLForConditionalGeneration`` and
``Qwen3VLProcessor`` on the tiny Qwen3-VL folders (tests/fixtures/tiny_qwen3_vl.py),
called as the reference server (sie-server 0.10.1) calls them:

- embedder (adapters/qwen3_vl_embedding): one item per call; a chat of a system turn
  (the instruction, stripped, a period added unless it ends in punctuation; default
  "Represent the user's input.") and a user turn (the item's images, then its text);
  ``processor.apply_chat_template(..., add_generation_prompt=True)``, then
  ``processor(text=[prompt], images=..., padding=True, truncation=True, max_length=32768)``;
  the base model's ``last_hidden_state`` at the last attended token, L2-normalised.

The processor is built from the folder's parts (tiny_qwen3_vl.reference_processor): the
real video processor needs torchvision, which Sift does not install. Run (the tiny models
are rebuilt from fixed seeds; nothing is downloaded):

    .venv/bin/python scripts/record_qwen3_vl_parity.py
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.adapters.parity.qwen3_vl_cases import EMBED_CASES, FIXTURE  # noqa: E402
from tests.fixtures.tiny_colpali import image_bytes  # noqa: E402
from tests.fixtures.tiny_qwen3_vl import (  # noqa: E402
    TINY_QWEN3_VL_EMBEDDER,
    build_tiny_qwen3_vl_embedder,
    reference_processor,
)

EMBED_DEFAULT_INSTRUCTION = "Represent the user's input."
MAX_LENGTH = 32768


def _f(x: Any) -> float:
    """A value as JSON, to seven significant digits (within 5e-8 of the float32; the tests allow 1e-5)."""
    return float(f"{float(x):.7g}")


def _instruction(text: str) -> str:
    text = text.strip()
    if text and not unicodedata.category(text[-1]).startswith("P"):
        text += "."
    return text


class Embedder:
    def __init__(self, folder: Path) -> None:
        import torch
        from transformers import Qwen3VLForConditionalGeneration

        self.processor = reference_processor(folder)
        self.model = Qwen3VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()

    def vector(self, text: str | None, images: list[Any], instruction: str) -> list[float]:
        import torch

        content: list[dict[str, Any]] = [{"type": "image", "image": image} for image in images]
        if text:
            content.append({"type": "text", "text": text})
        if not content:
            content.append({"type": "text", "text": ""})
        chat = [
            {"role": "system", "content": [{"type": "text", "text": instruction}]},
            {"role": "user", "content": content},
        ]
        prompt = self.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        kwargs: dict[str, Any] = {
            "text": [prompt],
            "return_tensors": "pt",
            "padding": True,
            "truncation": True,
            "max_length": MAX_LENGTH,
        }
        if images:
            kwargs["images"] = images
        inputs = self.processor(**kwargs)
        with torch.inference_mode():
            hidden = self.model.model(**inputs, return_dict=True).last_hidden_state
        last = int(inputs["attention_mask"].sum(dim=1)[0]) - 1
        vector = torch.nn.functional.normalize(hidden[0, last].unsqueeze(0), p=2, dim=-1)[0]
        return [_f(x) for x in vector.tolist()]


def main() -> None:
    from PIL import Image

    images = [Image.open(io.BytesIO(data)).convert("RGB") for data in image_bytes()]
    out: dict[str, Any] = {"models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        embedder = Embedder(build_tiny_qwen3_vl_embedder(Path(tmp) / "embedder"))
        cases: dict[str, Any] = {}
        for case in EMBED_CASES:
            instruction = _instruction(case.get("instruction") or "") or _instruction(EMBED_DEFAULT_INSTRUCTION)
            cases[case["name"]] = [
                embedder.vector(item.get("text"), [images[i] for i in item.get("images", [])], instruction)
                for item in case["items"]
            ]
        out["models"][TINY_QWEN3_VL_EMBEDDER] = {"encode": cases}
    path = ROOT / "tests" / "adapters" / "parity" / FIXTURE
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
