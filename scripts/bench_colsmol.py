"""colSmol on one core: the ``colpali-engine`` adapter's prepare + forward against colpali-engine's
own batch call (``ColIdefics3Processor.process_queries`` / ``process_images`` and the merged
``ColIdefics3``), in one process, the same torch, alternating the two arms.

The model is a random ColIdefics3 of SmolVLM-256M's shape (weights random: for timing only; no
hub), pages one 512-pixel tile (64 image tokens), queries a sentence and ten augmentation
tokens. colpali-engine's processor gets transformers' Pillow image processor, as the parity
recording's does (its default one needs torchvision). Prints items/s (median of the runs) per
arm and batch size. Run pinned to one core:

    HF_HUB_OFFLINE=1 taskset -c 1 .venv/bin/python scripts/bench_colsmol.py [folder]
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUERY = "what is the revenue in 2023 for the european segment?"


def build(root: Path) -> Path:
    """A random colSmol of SmolVLM-256M's shape (a ColIdefics3 base and a LoRA beside it)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, Idefics3Config, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from sift_server.adapters.colvision import colpali_engine_models
    from tests.fixtures.tiny_colpali import _bpe
    from tests.fixtures.tiny_colsmol import SPECIALS, TARGET_MODULES

    base, adapter = root / "base", root / "adapter"
    if (adapter / "adapter_config.json").is_file():
        return adapter
    adapter.mkdir(parents=True, exist_ok=True)
    _bpe(adapter, SPECIALS, pad="<|im_end|>", bos="<|im_start|>", eos="<end_of_utterance>", padding_side="left")
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": 512}, max_image_size={"longest_edge": 512}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=64).save_pretrained(adapter)
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": 49280,
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "max_position_embeddings": 8192,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "image_size": 512,
            "patch_size": 16,
        },
        scale_factor=4,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )
    torch.manual_seed(0)
    model = colpali_engine_models().ColIdefics3(config).eval()
    model.save_pretrained(base)
    lora = LoraConfig(r=32, lora_alpha=32, target_modules=TARGET_MODULES, init_lora_weights="gaussian")
    get_peft_model(model, lora).save_pretrained(adapter)
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    adapter_config["base_model_name_or_path"] = str(base)
    (adapter / "adapter_config.json").write_text(json.dumps(adapter_config))
    return adapter


def main(root: Path) -> None:
    import torch
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from sift_server.adapters.base import EncodeTask, Part
    from sift_server.adapters.colvision import ColVisionAdapter, colpali_engine_models
    from sift_server.service.images import RawImage, decode_image
    from tests.adapters.conftest import load_context
    from tests.fixtures.tiny_colpali import image_bytes

    adapter_folder = build(root)
    torch.set_num_threads(1)
    png = image_bytes([(512, 512, (200, 30, 30), "RGB")])[0]
    page = decode_image(RawImage(png, "png", "page"), 50_000_000)
    sift = ColVisionAdapter.load(load_context(adapter_folder))
    torch.set_num_threads(1)
    model = sift.model  # the merged ColIdefics3, for both arms
    processor = colpali_engine_models().ColIdefics3Processor(
        image_processor=Idefics3ImageProcessorPil.from_pretrained(adapter_folder),
        tokenizer=AutoTokenizer.from_pretrained(adapter_folder),
        image_seq_len=64,
    )

    def sift_call(n: int, pages: bool) -> None:
        if pages:
            task = EncodeTask(texts=[""] * n, images=[(page,)] * n)
        else:
            task = EncodeTask(texts=[QUERY] * n, is_query=True)
        prepared = sift.prepare(task)
        sift.forward([Part(prepared, 0, n)])

    def reference_call(n: int, pages: bool) -> None:
        images = [Image.open(io.BytesIO(png)).convert("RGB") for _ in range(n)]
        batch = processor.process_images(images) if pages else processor.process_queries([QUERY] * n)
        with torch.inference_mode():
            model(**batch)

    arms: dict[str, Callable[[int, bool], Any]] = {"sift": sift_call, "colpali-engine": reference_call}
    for pages, sizes in ((False, (1, 8, 32)), (True, (1, 8))):
        for n in sizes:
            times: dict[str, list[float]] = {name: [] for name in arms}
            for call in arms.values():
                call(n, pages)  # warm
            for _ in range(3):
                for name, call in arms.items():
                    start = time.perf_counter()
                    call(n, pages)
                    times[name].append(time.perf_counter() - start)
            rates = {name: n / statistics.median(runs) for name, runs in times.items()}
            kind = "pages" if pages else "queries"
            print(
                f"{kind} batch {n}: sift {rates['sift']:.2f} items/s, colpali-engine {rates['colpali-engine']:.2f} "
                f"items/s, ratio {rates['sift'] / rates['colpali-engine']:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/sift-bench-colsmol"))
