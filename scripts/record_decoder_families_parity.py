"""Record the parity fixture of the reference catalog's other decoder families once
(tests/adapters/parity/decoder_families_reference.json).

- The Mistral-family embedder (Linq-Embed-Mistral, SFR-Embedding, e5-mistral): the
  reference server formats each text with the entry's template and appends the
  tokenizer's ``</s>`` (its ``append_eos``), then pools the last token; here
  sentence-transformers' own ``SentenceTransformer.encode`` reads those texts from the
  tiny ``MistralModel`` folder (its module stack without Normalize for ``normalize: false``).
- The mxbai-rerank-v2 reranker: the mxbai-rerank library's own ``MxbaiRerankV2.predict``
  on the tiny ``Qwen2ForCausalLM`` folder (logit("1") - logit("0")), with its ``max_length``
  set so that its cut of a long document is the reference server's (the whole row within
  the entry's 512 tokens).

The mxbai-rerank library is not a dependency of Sift; fetch it for the recording only:

    .venv/bin/pip download --no-deps mxbai-rerank==0.1.6 batched==0.1.5 -d /tmp/mxbai
    for w in /tmp/mxbai/*.whl; do unzip -o "$w" -d /tmp/mxbai/src; done
    PYTHONPATH=/tmp/mxbai/src .venv/bin/python scripts/record_decoder_families_parity.py

The tiny models are rebuilt from their fixed seeds; nothing is downloaded."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.adapters.parity.decoder_cases import (  # noqa: E402
    FAMILIES_FIXTURE,
    MAX_SEQ,
    MISTRAL_EMBED_CASES,
    MXBAI_SCORE_CASES,
)
from tests.fixtures.tiny_decoder import build_tiny_mistral_embedder, build_tiny_mxbai_reranker  # noqa: E402

RERANK_MAX_LENGTH = 512


def embed_answers(folder: Path) -> dict[str, list[list[float]]]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    model.max_seq_length = MAX_SEQ
    unnormalized = SentenceTransformer(modules=[model[0], model[1]], device="cpu")
    out: dict[str, list[list[float]]] = {}
    for case in MISTRAL_EMBED_CASES:
        encoder = model if case.get("options", {}).get("normalize", True) else unnormalized
        vectors = encoder.encode(case["library_texts"], convert_to_numpy=True, batch_size=32)
        out[case["name"]] = vectors.astype(float).tolist()
    return out


def score_answers(folder: Path) -> dict[str, list[float]]:
    from mxbai_rerank import MxbaiRerankV2

    model = MxbaiRerankV2(str(folder), device="cpu", torch_dtype="float32", max_length=RERANK_MAX_LENGTH)
    # The library caps query + document at max_length and adds its template around them; the
    # reference server caps the whole row at the entry's limit.
    model.max_length = RERANK_MAX_LENGTH - model.predefined_length
    # The library joins query and document with prepare_for_model, which transformers 5 removed;
    # this is that call's documented result for the arguments the library passes (no special
    # tokens, the second sequence cut so that both fit in max_length).
    model.tokenizer.prepare_for_model = _prepare_for_model
    out: dict[str, list[float]] = {}
    for case in MXBAI_SCORE_CASES:
        scores = model.predict([case["query"]] * len(case["texts"]), case["texts"])
        out[case["name"]] = scores.double().tolist()
    return out


def _prepare_for_model(
    ids: list[int], pair_ids: list[int], *, truncation: str, max_length: int, **_: object
) -> dict[str, list[int]]:
    assert truncation == "only_second"
    return {"input_ids": ids + pair_ids[: max(0, max_length - len(ids))]}


def main() -> None:
    import mxbai_rerank
    import sentence_transformers
    import torch
    import transformers

    with tempfile.TemporaryDirectory() as tmp:
        fixture = {
            "recorded_with": {
                "sentence-transformers": sentence_transformers.__version__,
                "mxbai-rerank": getattr(mxbai_rerank, "__version__", "0.1.6"),
                "transformers": transformers.__version__,
                "torch": torch.__version__,
            },
            "embed_mistral": embed_answers(build_tiny_mistral_embedder(Path(tmp) / "mistral")),
            "score_mxbai": score_answers(build_tiny_mxbai_reranker(Path(tmp) / "mxbai")),
        }
    path = ROOT / "tests" / "adapters" / "parity" / FAMILIES_FIXTURE
    path.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
