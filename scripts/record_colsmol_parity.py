"""Record the colSmol parity fixture once (tests/adapters/parity/colsmol_reference.json).

Every answer comes from colpali-engine 0.3.18's own classes, unmodified, on the tiny colSmol
(tests/fixtures/tiny_colsmol.py: a LoRA adapter folder over a ColIdefics3 base), loaded as the
reference server loads ``vidore/colSmol-256M`` and called as colpali-engine's documentation shows:

- ``ColIdefics3.from_pretrained(<base>)``, the LoRA applied with PEFT's
  ``PeftModel.from_pretrained(...)`` and merged (``merge_and_unload``), as the reference does;
- ``ColIdefics3Processor`` over the adapter folder's tokenizer, with transformers' Pillow
  Idefics3 image processor (the settings of the folder's): Sift resizes pages with Pillow,
  having no torchvision, so both sides get the same pixels; the torchvision processor that
  ``ColIdefics3Processor.from_pretrained`` builds gives the same token ids (checked here), and
  its pages are stored apart (``resized_pages``) for the resize difference docs/models.md gives;
- a text: ``process_queries([text])`` alone; a page: ``process_images([page])`` alone (the
  reference's answer to a one-page request; a batch of pages is left-padded and the model's
  positions then count the padding, so a padded page's answer moves: measured and printed);
- only the ``pages`` and ``queries`` cases' vectors are stored (see colvision_cases.py),
  as float32 bytes; scores: the processor's own ``score`` (MaxSim), one candidate at a time.

Run with the interpreter of an environment that has torchvision (the one used: Python 3.11,
torch 2.14.1 and torchvision 0.29.1, transformers 5.16.1, peft 0.20.0, Pillow 13.0.0,
colpali-engine 0.3.18 without dependencies); the tiny folders are built by Sift's own .venv
(fixed seeds, nothing downloaded), exactly as the tests build them:

    /path/to/reference-venv/bin/python scripts/record_colsmol_parity.py
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

from tests.adapters.parity.colsmol_cases import (  # noqa: E402
    EMBED_CASES,
    FIXTURE,
    RECORDED_CASES,
    SCORE_CASES,
    TOL,
    expected_items,
    reads_as_text,
)
from tests.fixtures.tiny_colsmol import RESIZED_PAGES, TINY_COLSMOL, colsmol_images  # noqa: E402


def _packed(vectors: Any) -> dict[str, Any]:
    """A ``(tokens, 128)`` float32 matrix as its shape and little-endian bytes in base64."""
    import base64

    import numpy as np

    array = np.ascontiguousarray(vectors.float().numpy(), dtype="<f4")
    return {"shape": list(array.shape), "f32": base64.b64encode(array.tobytes()).decode()}


class Reference:
    def __init__(self, folder: Path) -> None:
        import torch
        from colpali_engine.models import ColIdefics3, ColIdefics3Processor
        from peft import PeftModel
        from PIL import Image
        from transformers import AutoTokenizer
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

        base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
        model = ColIdefics3.from_pretrained(base, dtype=torch.float32)
        self.model = PeftModel.from_pretrained(model, str(folder)).merge_and_unload().eval()
        self.torchvision_processor = ColIdefics3Processor.from_pretrained(str(folder))
        self.processor = ColIdefics3Processor(
            image_processor=Idefics3ImageProcessorPil.from_pretrained(str(folder)),
            tokenizer=AutoTokenizer.from_pretrained(str(folder)),
            image_seq_len=self.torchvision_processor.image_seq_len,
        )
        self.images = [Image.open(io.BytesIO(data)).convert("RGB") for data in colsmol_images()]

    def _rows(self, batch: Any) -> list[Any]:
        import torch

        with torch.inference_mode():
            embeddings = self.model(**batch)
        mask = batch["attention_mask"].bool()
        return [embeddings[i][mask[i]] for i in range(embeddings.shape[0])]

    def text(self, text: str) -> Any:
        [row] = self._rows(self.processor.process_queries([text]))
        return row

    def page(self, image: Any, processor: Any = None) -> Any:
        [row] = self._rows((processor or self.processor).process_images([image]))
        return row

    def items(self, items: list[dict[str, Any]], is_query: bool) -> list[Any]:
        import torch

        out = []
        for item in items:
            if reads_as_text(item, is_query):
                out.append(self.text(item["text"]))
            else:
                out.append(torch.cat([self.page(self.images[i]) for i in item["images"]]))
        return out

    def score(self, query: str, items: list[dict[str, Any]]) -> list[float]:
        q = self.text(query)
        return [float(self.processor.score([q], [d])[0, 0]) for d in self.items(items, False)]


def main() -> None:
    out: dict[str, Any] = {
        "recorded_with": "colpali-engine 0.3.18 ColIdefics3 (LoRA merged by PEFT) and ColIdefics3Processor",
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        build = "from pathlib import Path; import sys; from tests.fixtures.tiny_colsmol import build_tiny_colsmol; "
        build += "print(build_tiny_colsmol(Path(sys.argv[1])))"
        sift_python = str(ROOT / ".venv" / "bin" / "python")
        folder = Path(
            subprocess.run(
                [sift_python, "-c", build, str(Path(tmp) / "colsmol")],
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()[-1]
        )
        ref = Reference(folder)
        for image in ref.images:  # the two processors differ only in their pixels
            ids = ref.processor.process_images([image])["input_ids"]
            assert ids.tolist() == ref.torchvision_processor.process_images([image])["input_ids"].tolist()
        out["models"][TINY_COLSMOL] = {
            "embed": {
                case["name"]: [_packed(vectors) for vectors in ref.items(case["items"], case["is_query"])]
                for case in EMBED_CASES
                if case["name"] in RECORDED_CASES
            },
            "score": {
                case["name"]: [float(s) for s in ref.score(case["query"], case["items"])] for case in SCORE_CASES
            },
        }
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
        # Pages as colpali-engine's own (torchvision) processor resizes them (two, to keep the file small).
        out["resized_pages"] = [_packed(ref.page(ref.images[i], ref.torchvision_processor)) for i in RESIZED_PAGES]
        # How far a left-padded batch moves a page (not stored; Sift answers each page as alone).
        batched = ref._rows(ref.processor.process_images(ref.images))
        moved = max(float(abs(b.float().numpy() - a).max()) for b, a in zip(batched, stored["pages"], strict=True))
        print(f"pages in one padded batch differ from alone by at most {moved:.4g}")
    path = ROOT / "tests" / "adapters" / "parity" / FIXTURE
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
