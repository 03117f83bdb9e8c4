"""Items/s of the decoder embedder in process against sentence-transformers' own batch
encode, on one core (run it under ``taskset -c 0``), at batch 1, 8 and 32.

The model is a random Qwen3 of MiniLM's size (hidden 384, 6 layers, intermediate 1536,
6 query and 2 key/value heads) in the Qwen3-Embedding layout, with the tests' byte-level
tokenizer (about one token per character, so a sentence is 40-120 tokens). Both sides
read the same texts as queries with the default instruction; Sift runs
``prepare`` + ``forward`` of one request of ``batch`` items (what the engine does for
a batch), sentence-transformers ``encode(texts, prompt=..., batch_size=batch)``. One
torch thread each; each figure is the best of ``--rounds`` interleaved rounds over the corpus.

    taskset -c 0 .venv/bin/python scripts/bench_decoder.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_timing import corpus, items_per_second, largest_differences, report  # noqa: E402

from sift_bench.workload.decoder_models import build_minilm_qwen3_embedder as build  # noqa: E402

WORDS = [
    "the",
    "search",
    "team",
    "wants",
    "its",
    "model",
    "served",
    "with",
    "answers",
    "equal",
    "to",
    "the",
    "reference",
    "library",
    "on",
    "every",
    "query",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--backend", action="append", help="Sift's backends to time (default: torch)")
    args = parser.parse_args()
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from sift_server.adapters.base import EncodeTask, LoadContext, Part
    from sift_server.adapters.decoder_embedder import DecoderEmbedderAdapter
    from tests.fixtures.tiny_decoder import QUERY_INSTRUCTION, QUERY_PROMPT, QUERY_TEMPLATE

    torch.set_num_threads(1)
    texts = corpus(WORDS, args.items)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "qwen3-minilm-size")
        options = {"device": "cpu", "query_template": QUERY_TEMPLATE, "default_instruction": QUERY_INSTRUCTION}
        adapters = {
            backend: DecoderEmbedderAdapter.load(
                LoadContext(
                    path=folder,
                    options=options,
                    max_sequence_length=512,
                    torch_threads=1,
                    backend=backend,
                    precision="fp32",
                    cache_dir=Path(tmp) / "cache",
                )
            )
            for backend in args.backend or ["torch"]
        }
        reference = SentenceTransformer(str(folder), device="cpu", local_files_only=True)

        def sift_on(adapter: DecoderEmbedderAdapter) -> Callable[[list[str]], np.ndarray]:
            def sift(batch: list[str]) -> np.ndarray:
                prepared = adapter.prepare(EncodeTask(texts=batch, is_query=True))
                return np.stack(adapter.forward([Part(prepared, 0, len(batch))])[0])

            return sift

        def library(batch: list[str]) -> np.ndarray:
            out: np.ndarray = reference.encode(batch, prompt=QUERY_PROMPT, batch_size=len(batch), convert_to_numpy=True)
            return out

        arms: dict[str, Callable[[list[str]], np.ndarray]] = {
            f"sift {backend}": sift_on(adapter) for backend, adapter in adapters.items()
        }
        arms["sentence-transformers"] = library
        worst = largest_differences(arms, library, texts[:8])
        results = items_per_second(arms, texts, rounds=args.rounds)
    report(
        results,
        args.json,
        max_abs_diff_to_library_batch8=worst,
    )


if __name__ == "__main__":
    main()
