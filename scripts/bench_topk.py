"""TopK-Embed on one core: the ``topk-embed`` adapter's prepare + forward against the reference
server's own ``TopkEmbedAdapter.encode`` (sie-server 0.10.1 in ``sift bench reference-setup``'s
environment: the same torch 2.13 CPU build and transformers 5.16.1), each arm in its own process
pinned to the same core, rounds alternating the arms.

The model is a random TopK-Embed folder (weights random: for timing only; no hub) of
MiniLM-like width: a ``Qwen3_5Model`` of hidden size 384 with six text layers (four
gated-delta-rule, two full-attention), a four-block vision tower of width 256 and a 128-wide
head; the tokenizer is the tiny byte-level one (a sentence is some 60 tokens). Items: queries
(a sentence), text documents (three sentences) and pages (256 × 256 pixels: 64 image tokens, a
size neither arm resizes). Prints items/s per arm, kind and batch size (median of the rounds)
and writes them as JSON:

    HF_HUB_OFFLINE=1 PYTHONPATH=server/src:sdk/src:bench/src:. \\
        .venv/bin/python scripts/bench_topk.py [--rounds 3] [--core 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (1, 8, 32)
KINDS = ("queries", "documents", "pages")
SENTENCE = "what was the revenue of the european segment in the third quarter of 2023?"
DOCUMENT = (
    "The European segment grew its revenue by eight percent in the third quarter. "
    "Margins improved as input costs fell. The outlook for the year was raised."
)
PAGE_SIDE = 256


def build(root: Path) -> Path:
    """A random TopK-Embed folder of MiniLM-like width (tiny_topk's layout)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil
    from transformers.models.qwen3_5 import Qwen3_5Config, Qwen3_5Model

    from tests.fixtures import tiny_topk
    from tests.fixtures.tiny_qwen3_vl import CHAT_TEMPLATE, _tokenizer

    folder = root / "topk-bench"
    if (folder / "model.safetensors").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    _tokenizer(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    Qwen2VLImageProcessorPil(
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        size={"shortest_edge": 64 * 32 * 32, "longest_edge": 1280 * 32 * 32},
    ).save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    raw = tiny_topk._config(tokenizer)
    raw["text_config"].update(
        hidden_size=384,
        intermediate_size=1536,
        num_hidden_layers=6,
        layer_types=["linear_attention", "linear_attention", "full_attention"] * 2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=64,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_num_key_heads=3,
        linear_num_value_heads=6,
    )
    raw["text_config"]["rope_parameters"].update(partial_rotary_factor=0.25, mrope_section=[2, 3, 3])
    raw["vision_config"].update(hidden_size=256, intermediate_size=1024, num_heads=4, depth=4, out_hidden_size=384)
    torch.manual_seed(0)
    model = Qwen3_5Model(Qwen3_5Config(**raw)).eval()
    tensors = {f"model.{name}": tensor.contiguous() for name, tensor in model.state_dict().items()}
    tensors["head.weight"] = (torch.randn(128, 384) / 384**0.5).contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    skip = sorted({int(tokenizer.convert_tokens_to_ids(t)) for t in (".", ",")} | set(tokenizer.all_special_ids))
    raw.update(
        model_type="topk_embed",
        output_dim=128,
        query_template="Query: ",
        document_prompt="Document: ",
        image_token_budget=1280,
        scoring_skip_ids=skip,
    )
    (folder / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"query_length": 1024, "document_length": 8192}))
    return folder


def _page() -> bytes:
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (PAGE_SIDE, PAGE_SIDE, 3), dtype=np.uint8), "RGB").save(buffer, "PNG")
    return buffer.getvalue()


def _time(call: Any, items: int, budget_s: float = 4.0) -> float:
    """Items/s of ``call`` (one batch of ``items``), repeated for about ``budget_s`` after a warm-up."""
    call()
    runs, started = 0, time.perf_counter()
    while runs < 2 or time.perf_counter() - started < budget_s:
        call()
        runs += 1
    return runs * items / (time.perf_counter() - started)


def arm_sift(folder: Path) -> dict[str, float]:
    import torch

    from sift_server.adapters.base import EncodeTask, Part
    from sift_server.adapters.topk_embed import TopkEmbedAdapter
    from tests.adapters.conftest import load_context
    from tests.adapters.multivector_tasks import decode_pages

    torch.set_num_threads(1)
    adapter = TopkEmbedAdapter.load(load_context(folder))
    page = decode_pages([_page()])[0]
    out = {}
    for kind in KINDS:
        for batch in BATCHES:
            if kind == "pages":
                task = EncodeTask(texts=[""] * batch, images=[(page,)] * batch)
            else:
                text = SENTENCE if kind == "queries" else DOCUMENT
                task = EncodeTask(texts=[text] * batch, is_query=kind == "queries")

            def call(task: EncodeTask = task) -> None:
                prepared = adapter.prepare(task)
                adapter.forward([Part(prepared, 0, len(prepared.item_costs))])

            out[f"{kind}/{batch}"] = _time(call, batch)
    return out


def arm_reference(folder: Path) -> dict[str, float]:
    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    from sie_server.adapters.topk_embed.adapter import TopkEmbedAdapter
    from sie_server.types.inputs import Item
    from topk_reference_driver import _identity_resize_only, _image_only_processor

    torch.set_num_threads(1)
    _image_only_processor()
    adapter = TopkEmbedAdapter(folder, compute_precision="float32", packed=False)
    adapter.load("cpu")
    _identity_resize_only()
    page = {"data": _page(), "format": "png"}
    out = {}
    for kind in KINDS:
        for batch in BATCHES:
            if kind == "pages":
                items = [Item(images=[page]) for _ in range(batch)]
            else:
                items = [Item(text=SENTENCE if kind == "queries" else DOCUMENT) for _ in range(batch)]

            def call(items: list[Any] = items, is_query: bool = kind == "queries") -> None:
                adapter.encode(items, ["multivector"], is_query=is_query)

            out[f"{kind}/{batch}"] = _time(call, batch)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--root", type=Path, default=Path("/tmp/sift-bench-topk"))
    parser.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "sift" / "reference-venv")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--arm", choices=("sift", "reference"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        folder = args.root / "topk-bench"
        answer = arm_sift(folder) if args.arm == "sift" else arm_reference(folder)
        print(json.dumps(answer))
        return
    folder = build(args.root)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    ref_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    pythons = {"sift": (sys.executable, env), "reference": (str(args.venv / "bin" / "python"), ref_env)}
    runs: dict[str, list[dict[str, float]]] = {"sift": [], "reference": []}
    for _ in range(args.rounds):
        for arm, (python, arm_env) in pythons.items():
            command = ["taskset", "-c", str(args.core), python, __file__, "--arm", arm, "--root", str(args.root)]
            done = subprocess.run(command, env=arm_env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{arm}: {done.stderr[-3000:]}")
            runs[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
    result: dict[str, Any] = {"rounds": args.rounds, "core": args.core, "items_per_s": {}}
    for key in runs["sift"][0]:
        sift = statistics.median(run[key] for run in runs["sift"])
        reference = statistics.median(run[key] for run in runs["reference"])
        result["items_per_s"][key] = {"sift": round(sift, 2), "reference": round(reference, 2),
                                      "ratio": round(sift / reference, 3)}  # fmt: skip
        print(f"{key:>14}  sift {sift:8.2f}  reference {reference:8.2f}  ratio {sift / reference:5.2f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
