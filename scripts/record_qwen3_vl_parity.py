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
- reranker (adapters/qwen3_vl_reranker): a request's pairs in one call; each a chat of the
  judging system turn and a user turn (``<Instruct>: ``, ``<Query>:``, the query,
  ``\n<Document>:``, the candidate's image, its text); one processor call over every
  prompt and image (unpadded, with offsets); past ``max_seq_length`` the candidate text's
  last tokens dropped (tokens wholly inside its characters, found through a sentinel);
  ``tokenizer.pad``; the image-token map; the model's logits at each row's last attended
  token, ``sigmoid(yes - no)``.

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

from tests.adapters.parity.qwen3_vl_cases import EMBED_CASES, FIXTURE, SCORE_CASES  # noqa: E402
from tests.fixtures.tiny_colpali import image_bytes  # noqa: E402
from tests.fixtures.tiny_qwen3_vl import (  # noqa: E402
    TINY_QWEN3_VL_EMBEDDER,
    TINY_QWEN3_VL_RERANKER,
    build_tiny_qwen3_vl_embedder,
    build_tiny_qwen3_vl_reranker,
    reference_processor,
)

EMBED_DEFAULT_INSTRUCTION = "Represent the user's input."
RERANK_DEFAULT_INSTRUCTION = "Retrieve relevant documents for the query."
RERANK_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
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


class Reranker:
    def __init__(self, folder: Path) -> None:
        import torch
        from transformers import Qwen3VLForConditionalGeneration

        self.processor = reference_processor(folder)
        self.model = Qwen3VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
        tokenizer = self.processor.tokenizer
        self.yes = tokenizer.convert_tokens_to_ids("yes")
        self.no = tokenizer.convert_tokens_to_ids("no")

    def chat(self, instruction: str, query: str, text: str | None, image: Any) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = [
            {"type": "text", "text": "<Instruct>: " + instruction},
            {"type": "text", "text": "<Query>:"},
            {"type": "text", "text": query},
            {"type": "text", "text": "\n<Document>:"},
        ]
        if image is not None:
            content.append({"type": "image", "image": image})
        if text:
            content.append({"type": "text", "text": text})
        return [
            {"role": "system", "content": [{"type": "text", "text": RERANK_SYSTEM}]},
            {"role": "user", "content": content},
        ]

    def expand(self, prompts: list[str], grids: list[list[int]]) -> list[str]:
        token = self.processor.image_token
        merge = int(self.processor.image_processor.merge_size) ** 2
        out, g = [], 0
        for prompt in prompts:
            while token in prompt:
                t, h, w = grids[g]
                prompt = prompt.replace(token, "<|placeholder|>" * (t * h * w // merge), 1)
                g += 1
            out.append(prompt.replace("<|placeholder|>", token))
        return out

    def scores(self, query: str, items: list[tuple[str | None, Any]], instruction: str, limit: int) -> list[float]:
        import numpy as np
        import torch

        template = self.processor.apply_chat_template
        prompts, marked, images, texts = [], [], [], []
        for i, (text, image) in enumerate(items):
            sentinel = f"SIE_DOCUMENT_TEXT_BOUNDARY_{i}"
            prompts.append(
                template(self.chat(instruction, query, text, image), tokenize=False, add_generation_prompt=True)
            )
            marked.append(
                template(self.chat(instruction, query, sentinel, image), tokenize=False, add_generation_prompt=True)
            )
            texts.append(text or "")
            if image is not None:
                images.append(image)
        kwargs: dict[str, Any] = {
            "text": prompts,
            "return_tensors": None,
            "padding": False,
            "truncation": False,
            "return_mm_token_type_ids": False,
            "return_offsets_mapping": True,
        }
        if images:
            kwargs["images"] = images
        encoded = self.processor(**kwargs)
        grids = [list(map(int, g)) for g in encoded["image_grid_thw"]] if images else []
        expanded, expanded_marked = self.expand(prompts, grids), self.expand(marked, grids)
        rows = []
        for i, ids in enumerate(encoded["input_ids"]):
            ids = [int(x) for x in ids]
            if len(ids) > limit:
                prefix, suffix = expanded_marked[i].split(f"SIE_DOCUMENT_TEXT_BOUNDARY_{i}", 1)
                assert expanded[i] == prefix + texts[i] + suffix
                start, end = len(prefix), len(prefix) + len(texts[i])
                inside = [k for k, (a, b) in enumerate(encoded["offset_mapping"][i]) if start <= a < b <= end]
                # The reference refuses a pair whose kept part alone is past the limit.
                assert len(ids) - len(inside) <= limit, f"pair {i}: the limit leaves no room"
                keep = set(inside[: limit - (len(ids) - len(inside))])
                ids = [t for k, t in enumerate(ids) if k not in set(inside) or k in keep]
            rows.append(ids)
        inputs = dict(self.processor.tokenizer.pad({"input_ids": rows}, padding=True, return_tensors="pt"))
        for key, value in encoded.items():
            if key not in {"input_ids", "attention_mask", "offset_mapping", "mm_token_type_ids"}:
                inputs[key] = torch.as_tensor(np.asarray(value))
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == self.processor.image_token_id).to(torch.int32)
        with torch.inference_mode():
            logits = self.model(**inputs, return_dict=True).logits
        mask = inputs["attention_mask"]
        positions = torch.arange(mask.shape[1]).expand_as(mask)
        last = positions.masked_fill(~mask.bool(), -1).max(dim=1).values
        chosen = logits[torch.arange(len(rows)), last]
        out = torch.sigmoid(chosen[:, self.yes].float() - chosen[:, self.no].float())
        return [_f(x) for x in out.tolist()]


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
        reranker = Reranker(build_tiny_qwen3_vl_reranker(Path(tmp) / "reranker"))
        scores: dict[str, Any] = {}
        for case in SCORE_CASES:
            pairs = [
                (item.get("text"), images[item["images"][0]] if item.get("images") else None) for item in case["items"]
            ]
            instruction = case.get("instruction") or RERANK_DEFAULT_INSTRUCTION
            scores[case["name"]] = reranker.scores(
                case["query"], pairs, instruction, case.get("max_seq_length", MAX_LENGTH)
            )
        out["models"][TINY_QWEN3_VL_RERANKER] = {"score": scores}
    path = ROOT / "tests" / "adapters" / "parity" / FIXTURE
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
