"""Record the BGE-M3 parity fixture once (tests/adapters/parity/m3_reference.json).

Every answer comes from FlagEmbedding's own ``BGEM3FlagModel`` on the tiny XLM-RoBERTa
with the M3 heads (tests/fixtures/tiny_m3.py): ``encode(..., return_dense=True,
return_sparse=True, return_colbert_vecs=True)`` for the vectors (``normalize_embeddings=False``
for ``normalize: false``), and for scores its ``compute_lexical_matching_score`` (sparse) and
``colbert_score`` (MaxSim over the query's vectors, divided by their count), the dense
vectors' dot product, and the reference server's ``hybrid`` weighted sum of the three.
The reference server prepends an instruction as ``f"{instruction} {text}"``; so does this script.

FlagEmbedding 1.4.2 is not a dependency of Sift; install it apart, without its dependencies
(it runs on the server's torch and transformers):

    .venv/bin/python -m pip install --no-deps --target .venv/flag-ref FlagEmbedding==1.4.2
    PYTHONPATH=.venv/flag-ref .venv/bin/python scripts/record_m3_parity.py

The tiny model is rebuilt from its fixed seed; nothing is downloaded."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.adapters.parity.m3_cases import (  # noqa: E402
    DEFAULT_WEIGHTS,
    EMBED_CASES,
    FIXTURE,
    MAX_SEQ,
    SCORE_CASES,
)
from tests.fixtures.tiny_m3 import build_tiny_m3  # noqa: E402


def _f(x: Any) -> float:
    """A float32 value as JSON: nine significant digits are exact for float32."""
    return float(f"{float(x):.9g}")


def _texts(case: dict[str, Any], texts: list[str]) -> list[str]:
    instruction = case.get("instruction")
    return [f"{instruction} {t}" for t in texts] if instruction else list(texts)


def _encode(model: Any, texts: list[str]) -> dict[str, Any]:
    return dict(
        model.encode(
            texts,
            batch_size=32,
            max_length=MAX_SEQ,
            return_dense=True,
            return_sparse=True,
            return_colbert_vecs=True,
        )
    )


def embed_answers(normalized: Any, raw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for case in EMBED_CASES:
        model = raw if case.get("options", {}).get("normalize") is False else normalized
        got = _encode(model, _texts(case, case["texts"]))
        out[case["name"]] = {
            "dense": [[_f(x) for x in row] for row in got["dense_vecs"]],
            "sparse": [
                {"indices": [int(k) for k in weights], "values": [_f(v) for v in weights.values()]}
                for weights in got["lexical_weights"]
            ],
            "multivector": [[[_f(x) for x in row] for row in vecs] for vecs in got["colbert_vecs"]],
        }
    return out


def score_answers(model: Any) -> dict[str, list[float]]:
    import numpy as np

    out: dict[str, list[float]] = {}
    for case in SCORE_CASES:
        options = case.get("options", {})
        mode = options.get("score_mode", "dense")
        weights = {**DEFAULT_WEIGHTS, **options.get("score_weights", {})}
        query = _encode(model, _texts(case, [case["query"]]))
        docs = _encode(model, _texts(case, case["texts"]))
        scores = []
        for i in range(len(case["texts"])):
            parts = {
                "dense": float(np.dot(query["dense_vecs"][0], docs["dense_vecs"][i])),
                "sparse": float(
                    model.compute_lexical_matching_score(query["lexical_weights"][0], docs["lexical_weights"][i])
                ),
                "colbert": float(model.colbert_score(query["colbert_vecs"][0], docs["colbert_vecs"][i])),
            }
            if mode == "hybrid":
                scores.append(sum(weights[k] * parts[k] for k in parts if weights[k] > 0))
            else:
                scores.append(parts[mode])
        out[case["name"]] = scores
    return out


def main() -> None:
    from FlagEmbedding import BGEM3FlagModel

    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_m3(Path(tmp) / "m3")
        normalized = BGEM3FlagModel(str(folder), use_fp16=False, devices="cpu")
        raw = BGEM3FlagModel(str(folder), use_fp16=False, devices="cpu", normalize_embeddings=False)
        fixture = {
            "recorded_with": _versions(),
            "embed": embed_answers(normalized, raw),
            "score": score_answers(normalized),
        }
    path = ROOT / "tests" / "adapters" / "parity" / FIXTURE
    path.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    import torch
    import transformers

    return {
        "FlagEmbedding": version("FlagEmbedding"),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


if __name__ == "__main__":
    main()
