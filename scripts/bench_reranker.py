"""Items/s of the LLM reranker in process against the transformers procedure of the
Qwen3-Reranker model card (the reference's own call: template, left padding, one forward,
the last position's yes/no logits), on one core (run it under ``taskset -c 0``), at batch
1, 8 and 32 (query-document pairs per call).

The model is a random Qwen3ForCausalLM of MiniLM's size (hidden 384, 6 layers, intermediate
1536, 6 query and 2 key/value heads) in the Qwen3-Reranker layout, with the tests' byte-level
tokenizer (about one token per character: the prompt template alone is some 200 tokens, so
a pair is 250-330). Its vocabulary is a few hundred tokens, so the full language-model head
the model card computes costs next to nothing here; on a real Qwen3 (151,669 tokens) it is
a large share of the forward, and Sift's graph keeps only the yes and no rows of it. Sift
runs ``prepare`` + ``forward`` of one request of ``batch`` pairs (what the engine does for a
batch). One torch thread each; each figure is the best of ``--rounds`` interleaved rounds.

    taskset -c 0 .venv/bin/python scripts/bench_reranker.py --rounds 3
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

from sift_bench.workload.decoder_models import build_minilm_qwen3_reranker as build  # noqa: E402

QUERY = "what does the search team want from its model server?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import numpy as np
    import torch
    from record_decoder_parity import PREFIX, RERANK_MAX_LENGTH, SUFFIX
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sift_server.adapters.base import LoadContext, Part, ScoreTask
    from sift_server.adapters.llm_reranker import LlmRerankerAdapter
    from tests.fixtures.tiny_decoder import QUERY_INSTRUCTION

    torch.set_num_threads(1)
    texts = corpus(WORDS, args.items)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "qwen3-reranker-minilm-size")
        adapter = LlmRerankerAdapter.load(
            LoadContext(
                path=folder,
                options={"device": "cpu", "default_instruction": QUERY_INSTRUCTION},
                max_sequence_length=RERANK_MAX_LENGTH,
                torch_threads=1,
                backend="torch",
                precision="fp32",
                cache_dir=Path(tmp) / "cache",
            )
        )
        tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left", local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
        yes_id, no_id = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
        prefix_ids = tokenizer.encode(PREFIX, add_special_tokens=False)
        suffix_ids = tokenizer.encode(SUFFIX, add_special_tokens=False)

        def sift(batch: list[str]) -> np.ndarray:
            prepared = adapter.prepare(ScoreTask(query=QUERY, texts=batch))
            return np.array(adapter.forward([Part(prepared, 0, len(batch))])[0])

        def library(batch: list[str]) -> np.ndarray:
            # The model card's procedure, as scripts/record_decoder_parity.py records it.
            pairs = [f"<Instruct>: {QUERY_INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {doc}" for doc in batch]
            inputs = tokenizer(
                pairs,
                padding=False,
                truncation="longest_first",
                return_attention_mask=False,
                max_length=RERANK_MAX_LENGTH - len(prefix_ids) - len(suffix_ids),
            )
            inputs["input_ids"] = [prefix_ids + ids + suffix_ids for ids in inputs["input_ids"]]
            padded = tokenizer.pad(inputs, padding=True, return_tensors="pt", max_length=RERANK_MAX_LENGTH)
            with torch.inference_mode():
                logits = model(**padded).logits[:, -1, :]
            pair = torch.stack([logits[:, no_id], logits[:, yes_id]], dim=1)
            out: np.ndarray = torch.nn.functional.log_softmax(pair, dim=1)[:, 1].exp().double().numpy()
            return out

        arms: dict[str, Callable[[list[str]], np.ndarray]] = {"sift torch": sift, "transformers": library}
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
