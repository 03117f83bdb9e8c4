"""Items/s of zerank-2's ``llm-reranker`` (``input_format: zerank``) in process against
sentence-transformers' own ``CrossEncoder.predict`` (the library the reference server's
``native_causal_cross_encoder`` adapter runs), on one core (run it under ``taskset -c 0``), at
batch 1, 8 and 32 (query-document pairs per call).

The model is a random Qwen3ForCausalLM of MiniLM's size (hidden 384, 6 layers, intermediate
1536, 6 query and 2 key/value heads) in zerank-2's CrossEncoder layout, with the tests'
byte-level tokenizer (about one token per character; its vocabulary reaches past the answer
token id 9454 with filler entries, so the output head is 9,460 rows, where zerank-2's is some
151,000: Sift's graph computes only the answer token's row, the library the whole head). Sift
runs ``prepare`` + ``forward`` of one request of ``batch`` pairs (what the engine does for a
batch). One torch thread each; each figure is the best of ``--rounds`` interleaved rounds.

    taskset -c 0 .venv/bin/python scripts/bench_zerank.py --rounds 3
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
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_decoder import WORDS  # noqa: E402
from bench_timing import corpus, items_per_second, largest_differences, report  # noqa: E402

QUERY = "what does the search team want from its model server?"
MAX_LENGTH = 512


def build(folder: Path) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from tests.fixtures import tiny_decoder

    tiny_decoder.build_tiny_zerank(folder)
    torch.manual_seed(0)
    small = Qwen3Config.from_pretrained(folder)
    config = Qwen3Config(
        vocab_size=small.vocab_size, pad_token_id=small.pad_token_id, hidden_size=384, intermediate_size=1536,
        num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2, head_dim=64, max_position_embeddings=1024,
        tie_word_embeddings=True,
    )  # fmt: skip
    Qwen3ForCausalLM(config).eval().save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import numpy as np
    import torch
    from sentence_transformers import CrossEncoder

    from sift_server.adapters.base import LoadContext, Part, ScoreTask
    from sift_server.adapters.llm_reranker import LlmRerankerAdapter

    torch.set_num_threads(1)
    texts = corpus(WORDS, args.items)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "zerank-minilm-size")
        adapter = LlmRerankerAdapter.load(
            LoadContext(
                path=folder,
                options={"device": "cpu", "input_format": "zerank"},
                max_sequence_length=MAX_LENGTH,
                torch_threads=1,
                backend="torch",
                precision="fp32",
                cache_dir=Path(tmp) / "cache",
            )
        )
        model = CrossEncoder(str(folder), device="cpu", max_length=MAX_LENGTH, local_files_only=True)

        def sift(batch: list[str]) -> np.ndarray:
            prepared = adapter.prepare(ScoreTask(query=QUERY, texts=batch))
            return np.array(adapter.forward([Part(prepared, 0, len(batch))])[0])

        def library(batch: list[str]) -> np.ndarray:
            scores = model.predict([(QUERY, doc) for doc in batch], batch_size=len(batch), show_progress_bar=False)
            return np.asarray(scores, dtype=np.float64)

        arms: dict[str, Callable[[list[str]], np.ndarray]] = {"sift torch": sift, "sentence-transformers": library}
        worst = largest_differences(arms, library, texts[:8])
        results = items_per_second(arms, texts, rounds=args.rounds)
        tokens = [len(row) for row in adapter.prepare(ScoreTask(query=QUERY, texts=texts)).payload]
    report(
        results,
        args.json,
        max_abs_score_diff_to_library_batch8=worst,
        tokens_per_pair={"min": min(tokens), "max": max(tokens)},
    )


if __name__ == "__main__":
    main()
