"""Items/s of the BGE-M3 adapter in process against FlagEmbedding's own batch call
(``BGEM3FlagModel.encode`` with dense, sparse and ColBERT vectors), on one core (run it under
``taskset -c 0``), at batch 1, 8 and 32.

The model is a random XLM-RoBERTa of MiniLM's size (hidden 384, 6 layers, 12 heads,
intermediate 1536) with the M3 heads, in the BGE-M3 layout, with the tests' tiny Unigram
tokenizer (whole words for the tiny vocabulary's words, characters otherwise: a text is
20-90 tokens). BGE-M3 itself (XLM-R large, 568M parameters) is too slow to time on the
shared development machine; the work per token is the same kind. Both sides compute all
three outputs: Sift runs ``prepare`` + ``forward`` of one request of ``batch`` items (what
the engine does for a batch), FlagEmbedding ``encode(texts, batch_size=batch,
return_dense=True, return_sparse=True, return_colbert_vecs=True)``. One torch thread each;
each figure is the best of ``--rounds`` interleaved rounds over the corpus.

FlagEmbedding is not a Sift dependency; install it apart, without its dependencies:

    .venv/bin/python -m pip install --no-deps --target .venv/flag-ref FlagEmbedding==1.4.2
    PYTHONPATH=.venv/flag-ref taskset -c 0 .venv/bin/python scripts/bench_m3.py --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_timing import corpus, items_per_second, largest_differences, report  # noqa: E402

from sift_bench.workload.m3_models import build_minilm_m3 as build  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = ["the", "capital", "of", "China", "is", "Beijing", "what", "gravity", "force", "bodies", "sparse", "search"]
WORDS += ["team", "wants", "its", "model", "served", "with", "answers"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--backend", action="append", help="Sift's backends to time (default: torch)")
    args = parser.parse_args()
    import numpy as np
    import torch
    from FlagEmbedding import BGEM3FlagModel

    from sift_server.adapters.base import EncodeTask, LoadContext, Part
    from sift_server.adapters.bge_m3 import BgeM3Adapter

    torch.set_num_threads(1)
    texts = corpus(WORDS, args.items)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "m3-minilm-size")
        adapters = {
            backend: BgeM3Adapter.load(
                LoadContext(
                    path=folder,
                    options={"device": "cpu"},
                    max_sequence_length=512,
                    torch_threads=1,
                    backend=backend,
                    precision="fp32",
                    cache_dir=Path(tmp) / "cache",
                )
            )
            for backend in args.backend or ["torch"]
        }
        reference = BGEM3FlagModel(str(folder), use_fp16=False, devices="cpu")

        def sift_on(adapter: BgeM3Adapter) -> Callable[[list[str]], np.ndarray]:
            def sift(batch: list[str]) -> np.ndarray:
                prepared = adapter.prepare(EncodeTask(texts=batch))
                items: list[dict[str, Any]] = adapter.forward([Part(prepared, 0, len(batch))])[0]
                return np.stack([item["dense"] for item in items])

            return sift

        def library(batch: list[str]) -> np.ndarray:
            # Its progress bars go to stderr; keep them off the terminal (they cost little).
            with contextlib.redirect_stderr(io.StringIO()):
                out = reference.encode(
                    batch,
                    batch_size=len(batch),
                    max_length=512,
                    return_dense=True,
                    return_sparse=True,
                    return_colbert_vecs=True,
                )
            return np.asarray(out["dense_vecs"]).reshape(len(batch), -1)

        arms: dict[str, Callable[[list[str]], np.ndarray]] = {
            f"sift {backend}": sift_on(adapter) for backend, adapter in adapters.items()
        }
        arms["FlagEmbedding"] = library
        worst = largest_differences(arms, library, texts[:8])
        tokens = [len(row) for row in next(iter(adapters.values())).prepare(EncodeTask(texts=texts)).payload.rows]
        results = items_per_second(arms, texts, rounds=args.rounds)
    report(
        results,
        args.json,
        max_abs_dense_diff_to_library_batch8=worst,
        tokens_per_text={"min": min(tokens), "max": max(tokens), "mean": round(sum(tokens) / len(tokens), 1)},
    )


if __name__ == "__main__":
    main()
