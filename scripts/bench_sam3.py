"""Images per second of SAM 3 on one core at batch 1 and 8: Sift's ``sam3`` adapter
against the reference server's own call (sie-server 0.10.1's ``Sam3Adapter``: its
``DetectionPreprocessor`` with transformers' torchvision ``Sam3ImageProcessor``, then
``extract``), in process, on random weights of the real architecture (``Sam3Config``'s
defaults: ViT-L/14 at 1008 px, 200 queries) with the tiny tokenizer (speed does not
depend on the weights' values). Each figure is prepare plus forward over 640 × 480
images, two labels a request: wall seconds and the process's CPU seconds (on a shared
machine the CPU seconds of a one-thread process are the steadier figure).

    PYTHONPATH=server/src:. .venv/bin/python scripts/bench_sam3.py build /tmp/sam3-full
    PYTHONPATH=server/src:. taskset -c 1 .venv/bin/python scripts/bench_sam3.py sift /tmp/sam3-full
    PYTHONPATH=/tmp/sam3ref taskset -c 1 /tmp/sam3venv312/bin/python scripts/bench_sam3.py reference /tmp/sam3-full

A third argument picks the batch sizes (``1,8`` by default).

(the reference environment as scripts/record_sam3_parity.py describes it). Prints one
line per batch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

LABELS = ["cat", "dog"]
BATCHES = (1, 8)


def _line(side: str, batch: int, wall: float, cpu: float) -> str:
    return f"{side} sam3 batch {batch}: {batch / cpu:.4f} images per CPU second ({cpu:.1f} s CPU, {wall:.1f} s wall)"


def _images() -> list[Any]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)) for _ in range(max(BATCHES))]


def build(folder: Path) -> None:
    import json

    import torch
    from transformers import Sam3Config, Sam3Model

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.fixtures.tiny_sam3 import build_tiny_sam3

    build_tiny_sam3(folder)
    config = Sam3Config(text_config={"vocab_size": 49408, "max_position_embeddings": 32})
    torch.manual_seed(0)
    Sam3Model(config).eval().save_pretrained(folder)
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    processor["size"] = {"height": 1008, "width": 1008}
    processor["mask_size"] = {"height": 288, "width": 288}
    (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))


def sift(folder: Path, batches: tuple[int, ...] = BATCHES) -> None:
    from sift_server.adapters.base import ExtractTask, LoadContext, Part
    from sift_server.adapters.sam3 import Sam3Adapter

    adapter = Sam3Adapter.load(
        LoadContext(path=folder, options={"device": "cpu"}, max_sequence_length=None, torch_threads=1)
    )
    images = _images()
    for batch in batches:
        task = ExtractTask(texts=[""] * batch, labels=tuple(LABELS), images=[(image,) for image in images[:batch]])
        start, cpu = time.perf_counter(), time.process_time()
        adapter.forward([Part(adapter.prepare(task), 0, batch)])
        print(_line("sift", batch, time.perf_counter() - start, time.process_time() - cpu), flush=True)


def reference(folder: Path, batches: tuple[int, ...] = BATCHES) -> None:
    import io

    import torch
    from sie_server.adapters.sam3.adapter import Sam3Adapter
    from sie_server.types.inputs import Item

    torch.set_num_threads(1)
    adapter = Sam3Adapter(str(folder), compute_precision="float32")
    adapter.load("cpu")
    preprocessor = adapter.get_preprocessor()
    encoded = []
    for image in _images():
        out = io.BytesIO()
        image.save(out, format="PNG")
        encoded.append(out.getvalue())
    for batch in batches:
        items = [Item(images=[{"data": data, "format": "png"}]) for data in encoded[:batch]]
        start, cpu = time.perf_counter(), time.process_time()
        prepared = preprocessor.prepare(items, config=None)
        adapter.extract(items, labels=LABELS, options={}, prepared_items=prepared.items)
        print(_line("reference", batch, time.perf_counter() - start, time.process_time() - cpu), flush=True)


if __name__ == "__main__":
    command, target = sys.argv[1], Path(sys.argv[2])
    if command == "build":
        build(target)
    else:
        sizes = tuple(int(size) for size in sys.argv[3].split(",")) if len(sys.argv) > 3 else BATCHES
        {"sift": sift, "reference": reference}[command](target, sizes)
