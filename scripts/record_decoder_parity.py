"""Record the decoder-family parity fixture once (tests/adapters/parity/decoder_reference.json).

The embedder's answers come from sentence-transformers' own ``SentenceTransformer.encode``
on the tiny Qwen3-Embedding-layout folder (``prompt=`` for the instruction,
``truncate_dim`` for Matryoshka, the module stack without its Normalize module for
``normalize: false``). The reranker's come from the Qwen3-Reranker model card's
formula, written out below with plain transformers: the chat template around
``<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {doc}``, the last
position's logits, log-softmax over [no, yes], exp of the yes column.

    .venv/bin/python scripts/record_decoder_parity.py

The tiny models are rebuilt from their fixed seeds; nothing is downloaded."""

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

from tests.adapters.parity.decoder_cases import (  # noqa: E402
    EMBED_CASES,
    FIXTURE,
    MAX_SEQ,
    SCORE_CASES,
)
from tests.fixtures.tiny_decoder import (  # noqa: E402
    QUERY_INSTRUCTION,
    build_tiny_qwen3_embedder,
    build_tiny_qwen3_reranker,
)

# The Qwen3-Reranker model card's template (https://huggingface.co/Qwen/Qwen3-Reranker-0.6B, "Usage").
SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
PREFIX = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
RERANK_MAX_LENGTH = 512


def embed_answers(folder: Path) -> dict[str, list[list[float]]]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    model.max_seq_length = MAX_SEQ
    unnormalized = SentenceTransformer(modules=[model[0], model[1]], device="cpu")
    out: dict[str, list[list[float]]] = {}
    for case in EMBED_CASES:
        normalize = case.get("options", {}).get("normalize", True)
        encoder = model if normalize else unnormalized
        kwargs: dict[str, Any] = {"prompt": case["prompt"], "convert_to_numpy": True, "batch_size": 32}
        if "truncate_dim" in case:
            kwargs |= {"truncate_dim": case["truncate_dim"], "normalize_embeddings": True}
        out[case["name"]] = encoder.encode(case["texts"], **kwargs).astype(float).tolist()
    return out


def score_answers(folder: Path) -> dict[str, list[float]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left", local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    yes_id = tokenizer.convert_tokens_to_ids("yes")
    no_id = tokenizer.convert_tokens_to_ids("no")
    prefix_ids = tokenizer.encode(PREFIX, add_special_tokens=False)
    suffix_ids = tokenizer.encode(SUFFIX, add_special_tokens=False)
    out: dict[str, list[float]] = {}
    for case in SCORE_CASES:
        instruction = case.get("instruction") or QUERY_INSTRUCTION
        pairs = [f"<Instruct>: {instruction}\n<Query>: {case['query']}\n<Document>: {doc}" for doc in case["texts"]]
        inputs = tokenizer(
            pairs,
            padding=False,
            truncation="longest_first",
            return_attention_mask=False,
            max_length=RERANK_MAX_LENGTH - len(prefix_ids) - len(suffix_ids),
        )
        inputs["input_ids"] = [prefix_ids + ids + suffix_ids for ids in inputs["input_ids"]]
        batch = tokenizer.pad(inputs, padding=True, return_tensors="pt", max_length=RERANK_MAX_LENGTH)
        with torch.inference_mode():
            logits = model(**batch).logits[:, -1, :]
        pair = torch.stack([logits[:, no_id], logits[:, yes_id]], dim=1)
        out[case["name"]] = torch.nn.functional.log_softmax(pair, dim=1)[:, 1].exp().double().tolist()
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        embedder = build_tiny_qwen3_embedder(Path(tmp) / "embedder")
        reranker = build_tiny_qwen3_reranker(Path(tmp) / "reranker")
        fixture = {
            "recorded_with": _versions(),
            "embed": embed_answers(embedder),
            "score": score_answers(reranker),
        }
    path = ROOT / "tests" / "adapters" / "parity" / FIXTURE
    path.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {path}")


def _versions() -> dict[str, str]:
    import sentence_transformers
    import torch
    import transformers

    return {
        "sentence-transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


if __name__ == "__main__":
    main()
