"""Record the ColPali-family parity fixture once (tests/adapters/parity/colpali_reference.json).

Every answer comes from transformers' own classes and processors on the tiny ColPali and
ColQwen2 (tests/fixtures/tiny_colpali.py), called as the reference server (sie-server
0.10.1, adapters/colpali) calls them:

- a text (a query, or a document without images): ``processor(text=[text])`` alone, the
  model's ``embeddings[0]``, L2-normalised again;
- images: ``processor(images=[...])`` over the request's images in one batch, each image's
  row without its padding (``attention_mask``), L2-normalised again; an item with several
  images gets its images' rows one after the other;
- scores: the processor's own ``score_retrieval`` (MaxSim) of the query's vectors against
  each candidate's, one candidate at a time (so no zero padding enters a max).

ColQwen2's model answers come from colpali-engine 0.3.18's own ``ColQwen2`` (the class the
ColQwen2 checkpoints were trained with) holding the ``-hf`` model's weights, given where the
image tokens are (``mm_token_type_ids``, as colpali-engine's processor gives them): it places
image tokens by Qwen2-VL's 2-D rotary positions, where transformers' ``ColQwen2ForRetrieval``
numbers them as text (its forward passes the language model embeddings only); texts are the
same in both. The inputs stay transformers' processor's (the ``-hf`` folder's). colpali-engine
is imported as Sift imports it (adapters/colvision.py: without torchvision). Run (the tiny
models are rebuilt from fixed seeds; nothing is downloaded):

    .venv/bin/python scripts/record_colpali_parity.py
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.adapters.parity.colpali_cases import (  # noqa: E402
    EMBED_CASES,
    FIXTURE,
    SCORE_CASES,
    reads_as_text,
)
from tests.fixtures.tiny_colpali import (  # noqa: E402
    TINY_COLPALI,
    TINY_COLQWEN2,
    build_tiny_colpali,
    build_tiny_colqwen2,
    image_bytes,
)


def _f(x: Any) -> float:
    """A value as JSON, to seven significant digits (within 5e-8 of the float32; the tests allow 1e-5)."""
    return float(f"{float(x):.7g}")


def _colpali_engine_colqwen2(hf_model: Any) -> Any:
    """colpali-engine's ``ColQwen2`` with the weights of transformers' ``ColQwen2ForRetrieval``
    (the same backbone; the projection sized to the ``-hf`` model's)."""
    import torch

    from sift_server.adapters.colvision import colpali_engine_models

    model = colpali_engine_models().ColQwen2(hf_model.config.vlm_config)
    model.custom_text_proj = torch.nn.Linear(model.custom_text_proj.in_features, hf_model.config.embedding_dim)
    weights = dict(hf_model.vlm.state_dict())
    weights.update({f"custom_text_proj.{k}": v for k, v in hf_model.embedding_proj_layer.state_dict().items()})
    model.load_state_dict(weights, strict=True)
    return model.eval()


class Reference:
    def __init__(self, folder: Path, colpali: bool) -> None:
        import torch
        from PIL import Image
        from transformers import ColPaliForRetrieval, ColPaliProcessor, ColQwen2ForRetrieval, ColQwen2Processor

        classes = (ColPaliForRetrieval, ColPaliProcessor) if colpali else (ColQwen2ForRetrieval, ColQwen2Processor)
        self.model = classes[0].from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()
        self.processor = classes[1].from_pretrained(folder, local_files_only=True)
        self.colqwen2 = None if colpali else _colpali_engine_colqwen2(self.model)
        # As the reference decodes them: Pillow's RGB conversion (alpha dropped).
        self.images = [Image.open(io.BytesIO(data)).convert("RGB") for data in image_bytes()]

    def _rows(self, batch: Any) -> list[Any]:
        import torch

        with torch.inference_mode():
            if self.colqwen2 is None:
                embeddings = self.model(**batch, use_cache=False).embeddings
            else:
                image_tokens = batch["input_ids"] == self.model.config.vlm_config.image_token_id
                embeddings = self.colqwen2(**batch, mm_token_type_ids=image_tokens.to(torch.int64))
            embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=-1)
        mask = batch["attention_mask"].bool()
        return [embeddings[i][mask[i]] for i in range(embeddings.shape[0])]

    def text(self, text: str) -> Any:
        [row] = self._rows(self.processor(text=[text]))
        return row

    def items(self, items: list[dict[str, Any]], is_query: bool) -> list[Any]:
        import torch

        indices = [i for item in items if not reads_as_text(item, is_query) for i in item["images"]]
        image_rows = iter(self._rows(self.processor(images=[self.images[i] for i in indices])) if indices else [])
        out = []
        for item in items:
            if reads_as_text(item, is_query):
                out.append(self.text(item["text"]))
            else:
                out.append(torch.cat([next(image_rows) for _ in item["images"]]))
        return out

    def score(self, query: str, items: list[dict[str, Any]]) -> list[float]:
        q = self.text(query)
        return [float(self.processor.score_retrieval([q], [d])[0, 0]) for d in self.items(items, False)]


def main() -> None:
    out: dict[str, Any] = {
        "recorded_with": "transformers ColPaliForRetrieval and processors; colpali-engine 0.3.18 ColQwen2 "
        "holding the ColQwen2ForRetrieval weights, with transformers' ColQwen2Processor",
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, build, colpali in (
            (TINY_COLPALI, build_tiny_colpali, True),
            (TINY_COLQWEN2, build_tiny_colqwen2, False),
        ):
            ref = Reference(build(root / name.replace("/", "_")), colpali)
            out["models"][name] = {
                "embed": {
                    case["name"]: [
                        [[_f(x) for x in row] for row in vectors.tolist()]
                        for vectors in ref.items(case["items"], case["is_query"])
                    ]
                    for case in EMBED_CASES
                },
                "score": {
                    case["name"]: [float(s) for s in ref.score(case["query"], case["items"])] for case in SCORE_CASES
                },
            }
    path = ROOT / "tests" / "adapters" / "parity" / FIXTURE
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
