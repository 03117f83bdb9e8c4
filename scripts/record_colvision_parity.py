"""Record the colpali-engine-layout parity fixture once (tests/adapters/parity/colvision_reference.json).

Every answer comes from colpali-engine 0.3.18's own classes, unmodified, on the tiny
ColQwen2.5 (tests/fixtures/tiny_colvision.py: a LoRA adapter folder over a ColQwen2_5 base),
called as its documentation shows:

- ``ColQwen2_5.from_pretrained(<adapter folder>)`` (transformers finds the base from the
  adapter's config and applies the LoRA), ``ColQwen2_5_Processor.from_pretrained(<adapter
  folder>, min_pixels=..., max_pixels=...)`` (the bounds the reference server passes);
- a text: ``process_queries([text])`` alone, the model's row;
- images: ``process_images([...])`` over the case's images in one batch, each row without its
  padding (``attention_mask``);
- only the ``pages`` and ``queries`` cases' vectors are stored (the other cases are those
  vectors arranged as the reference arranges them: see colvision_cases.py), as float32 bytes;
- scores: the processor's own ``score`` (MaxSim), one candidate at a time.

colpali-engine needs torchvision, which does not load beside Sift's CPU torch: run this with
the interpreter of a separate environment that has it (the one used: Python 3.11, torch 2.14.1
and torchvision 0.29.1, transformers 5.16.1, peft 0.20.0, Pillow 13.0.0, colpali-engine 0.3.18
installed without dependencies, since it pins torch below 2.14). The tiny folders are built by
Sift's own .venv (fixed seeds, nothing downloaded), exactly as the tests build them:

    /path/to/reference-venv/bin/python scripts/record_colvision_parity.py
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.adapters.parity.colvision_cases import (  # noqa: E402
    EMBED_CASES,
    FIXTURE,
    RECORDED_CASES,
    SCORE_CASES,
    TOL,
    expected_items,
    reads_as_text,
)
from tests.fixtures.tiny_colpali import image_bytes  # noqa: E402
from tests.fixtures.tiny_colvision import (  # noqa: E402
    MAX_PIXELS,
    MIN_PIXELS,
    RESIZED_SPECS,
    TINY_COLQWEN2_5,
    colvision_images,
)


def _packed(vectors: Any) -> dict[str, Any]:
    """A ``(tokens, 128)`` float32 matrix as its shape and little-endian bytes in base64
    (half the size of decimal text; the fixture stays small)."""
    import base64

    import numpy as np

    array = np.ascontiguousarray(vectors.float().numpy(), dtype="<f4")
    return {"shape": list(array.shape), "f32": base64.b64encode(array.tobytes()).decode()}


class Reference:
    def __init__(self, folder: Path) -> None:
        import torch
        from colpali_engine.models import ColQwen2_5, ColQwen2_5_Processor
        from PIL import Image

        self.model = ColQwen2_5.from_pretrained(str(folder), dtype=torch.float32).eval()
        self.processor = ColQwen2_5_Processor.from_pretrained(str(folder), min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
        self.images = [Image.open(io.BytesIO(data)).convert("RGB") for data in colvision_images()]

    def _rows(self, batch: Any) -> list[Any]:
        import torch

        with torch.inference_mode():
            embeddings = self.model(**batch)
        mask = batch["attention_mask"].bool()
        return [embeddings[i][mask[i]] for i in range(embeddings.shape[0])]

    def text(self, text: str) -> Any:
        [row] = self._rows(self.processor.process_queries([text]))
        return row

    def images_rows(self, images: list[Any]) -> list[Any]:
        return self._rows(self.processor.process_images(images))

    def items(self, items: list[dict[str, Any]], is_query: bool) -> list[Any]:
        import torch

        indices = [i for item in items if not reads_as_text(item, is_query) for i in item["images"]]
        image_rows = iter(self.images_rows([self.images[i] for i in indices]) if indices else [])
        out = []
        for item in items:
            if reads_as_text(item, is_query):
                out.append(self.text(item["text"]))
            else:
                out.append(torch.cat([next(image_rows) for _ in item["images"]]))
        return out

    def score(self, query: str, items: list[dict[str, Any]]) -> list[float]:
        q = self.text(query)
        return [float(self.processor.score([q], [d])[0, 0]) for d in self.items(items, False)]


def main() -> None:
    out: dict[str, Any] = {"recorded_with": "colpali-engine 0.3.18 ColQwen2_5 and ColQwen2_5_Processor", "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "colqwen2_5"
        build = (
            "from pathlib import Path; import sys; from tests.fixtures.tiny_colvision import build_tiny_colqwen2_5; "
        )
        build += "print(build_tiny_colqwen2_5(Path(sys.argv[1])))"
        sift_python = str(ROOT / ".venv" / "bin" / "python")
        folder = Path(
            subprocess.run(
                [sift_python, "-c", build, str(root)], cwd=ROOT, check=True, capture_output=True, text=True
            ).stdout.split()[-1]
        )
        ref = Reference(folder)
        out["models"][TINY_COLQWEN2_5] = {
            "embed": {
                case["name"]: [_packed(vectors) for vectors in ref.items(case["items"], case["is_query"])]
                for case in EMBED_CASES
                if case["name"] in RECORDED_CASES
            },
            "score": {
                case["name"]: [float(s) for s in ref.score(case["query"], case["items"])] for case in SCORE_CASES
            },
        }
        # The cases not stored: colpali-engine's own answers equal the stored vectors so arranged.
        stored = {
            name: [v.float().numpy() for v in ref.items(case["items"], case["is_query"])]
            for case in EMBED_CASES
            if (name := case["name"]) in RECORDED_CASES
        }
        for case in EMBED_CASES:
            if case["name"] not in RECORDED_CASES:
                got = [v.float().numpy() for v in ref.items(case["items"], case["is_query"])]
                for vectors, want in zip(got, expected_items(stored, case), strict=True):
                    assert vectors.shape == want.shape and abs(vectors - want).max() <= TOL, case["name"]
        # Resized pages: torchvision's resize here, Pillow's in Sift; kept for the docs' figure.
        from PIL import Image

        resized = [Image.open(io.BytesIO(data)).convert("RGB") for data in image_bytes(RESIZED_SPECS)]
        out["resized_pages"] = [_packed(v) for v in ref.images_rows(resized)]
    path = ROOT / "tests" / "adapters" / "parity" / FIXTURE
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
