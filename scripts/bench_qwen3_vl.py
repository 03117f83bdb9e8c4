"""Items/s of the Qwen3-VL embedder and reranker in process against the reference
server's own calls (scripts/record_qwen3_vl_parity.py: the embedder one item per forward,
as the reference runs it; the reranker a request's pairs in one processor call and one
forward), on one core (run it under ``taskset -c 0``), at batch 1, 8 and 32.

The model is a random Qwen3-VL with a text tower of MiniLM's size (hidden 384, 6 layers,
6 query and 2 key/value heads) and a small vision tower (4 layers of width 128), with the
tests' byte-level tokenizer and processor (tests/fixtures/tiny_qwen3_vl.py), so an image
is 196 tokens at the reference's minimum of 256 × 28 × 28 pixels. Arms: texts (the
embedder), images (the embedder, the parity images in turn), text pairs (the reranker).
Sift runs ``prepare`` + ``forward`` of one request of ``batch`` items (what the engine
does for a batch). One torch thread each; each figure is the best of ``--rounds``
interleaved rounds.

    taskset -c 0 .venv/bin/python scripts/bench_qwen3_vl.py --rounds 2
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_decoder import corpus  # noqa: E402

QUERY = "what does the search team want from its model server?"


def build(folder: Path) -> Path:
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from tests.fixtures.tiny_qwen3_vl import build_tiny_qwen3_vl

    build_tiny_qwen3_vl(folder, 0)
    small = Qwen3VLConfig.from_pretrained(folder)
    text = small.text_config.to_dict()
    text.update(
        hidden_size=384, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2,
        head_dim=64,
    )  # fmt: skip
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": [8, 12, 12]}
    vision = small.vision_config.to_dict()
    vision.update(
        depth=4, hidden_size=128, intermediate_size=512, num_heads=4, out_hidden_size=384,
        deepstack_visual_indexes=[1, 3],
    )  # fmt: skip
    config = Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=small.image_token_id,
        video_token_id=small.video_token_id,
        vision_start_token_id=small.vision_start_token_id,
        vision_end_token_id=small.vision_end_token_id,
    )
    torch.manual_seed(0)
    Qwen3VLForConditionalGeneration(config).eval().save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import numpy as np
    import torch
    from PIL import Image
    from record_qwen3_vl_parity import EMBED_DEFAULT_INSTRUCTION, RERANK_DEFAULT_INSTRUCTION, Embedder, Reranker

    from sift_server.adapters.base import EncodeTask, LoadContext, Part, ScoreTask
    from sift_server.adapters.qwen3_vl_embedder import Qwen3VLEmbedderAdapter
    from sift_server.adapters.qwen3_vl_reranker import Qwen3VLRerankerAdapter
    from tests.fixtures.tiny_colpali import image_bytes

    torch.set_num_threads(1)
    texts = corpus(args.items)
    pictures = [Image.open(io.BytesIO(data)).convert("RGB") for data in image_bytes()]
    images = [pictures[i % len(pictures)] for i in range(args.items)]
    results: dict[str, dict[str, dict[str, float]]] = {}
    worst: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "qwen3-vl-minilm-size")

        def context() -> LoadContext:
            return LoadContext(path=folder, options={"device": "cpu"}, max_sequence_length=32768, torch_threads=1)

        embedder, reranker = Qwen3VLEmbedderAdapter.load(context()), Qwen3VLRerankerAdapter.load(context())
        reference_embedder, reference_reranker = Embedder(folder), Reranker(folder)

        def sift_texts(batch: list[Any]) -> Any:
            prepared = embedder.prepare(EncodeTask(texts=batch))
            return np.stack([item["dense"] for item in embedder.forward([Part(prepared, 0, len(batch))])[0]])

        def sift_images(batch: list[Any]) -> Any:
            prepared = embedder.prepare(EncodeTask(texts=[""] * len(batch), images=[(image,) for image in batch]))
            return np.stack([item["dense"] for item in embedder.forward([Part(prepared, 0, len(batch))])[0]])

        def reference_texts(batch: list[Any]) -> Any:
            return np.array([reference_embedder.vector(text, [], EMBED_DEFAULT_INSTRUCTION) for text in batch])

        def reference_images(batch: list[Any]) -> Any:
            return np.array([reference_embedder.vector(None, [image], EMBED_DEFAULT_INSTRUCTION) for image in batch])

        def sift_pairs(batch: list[Any]) -> Any:
            prepared = reranker.prepare(ScoreTask(query=QUERY, texts=batch))
            return np.array(reranker.forward([Part(prepared, 0, len(batch))])[0])

        def reference_pairs(batch: list[Any]) -> Any:
            return np.array(
                reference_reranker.scores(QUERY, [(t, None) for t in batch], RERANK_DEFAULT_INSTRUCTION, 32768)
            )

        workloads: dict[str, tuple[list[Any], dict[str, Callable[[list[Any]], Any]]]] = {
            "embedder texts": (texts, {"sift": sift_texts, "reference": reference_texts}),
            "embedder images": (images, {"sift": sift_images, "reference": reference_images}),
            "reranker text pairs": (texts, {"sift": sift_pairs, "reference": reference_pairs}),
        }
        for workload, (items, arms) in workloads.items():
            worst[workload] = float(np.abs(arms["sift"](items[:8]) - arms["reference"](items[:8])).max())
            results[workload] = {}
            for size in (1, 8, 32):
                batches = [items[i : i + size] for i in range(0, len(items), size)]
                best = dict.fromkeys(arms, float("inf"))
                # Interleaved rounds: every arm once per round, so a busy machine slows them alike.
                for _ in range(args.rounds):
                    for name, call in arms.items():
                        start = time.perf_counter()
                        for batch in batches:
                            call(batch)
                        best[name] = min(best[name], time.perf_counter() - start)
                results[workload][f"batch {size}"] = {name: round(len(items) / s, 2) for name, s in best.items()}
                print(workload, size, results[workload][f"batch {size}"], file=sys.stderr, flush=True)
    report = {
        "items_per_s": results,
        "max_abs_diff_to_reference_batch8": worst,
        "affinity": sorted(os.sched_getaffinity(0)),
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
