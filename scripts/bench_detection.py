"""Images per second of the owlv2 and grounding-dino adapters at batch 1 and 8, on
random weights of the real base architectures (OWLv2 base patch 16 at 960 px;
Grounding DINO tiny: Swin-T, 900 queries, shortest edge 800), with the tiny
tokenizers (speed does not depend on the weights' values). Each figure is
prepare (the PIL image processor) plus one forward, over 640 × 480 images.

    PYTHONPATH=server/src:. taskset -c 1 .venv/bin/python scripts/bench_detection.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def _build(root: Path) -> dict[str, Path]:
    import torch
    from transformers import (
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoProcessor,
        Owlv2Config,
        Owlv2ForObjectDetection,
        Owlv2Processor,
    )
    from transformers.models.grounding_dino.image_processing_pil_grounding_dino import (
        GroundingDinoImageProcessorPil,
    )
    from transformers.models.owlv2.image_processing_pil_owlv2 import Owlv2ImageProcessorPil

    from tests.fixtures.tiny_detection import build_tiny_grounding_dino, build_tiny_owlv2

    owl = build_tiny_owlv2(root / "owl")
    Owlv2Processor(
        image_processor=Owlv2ImageProcessorPil(size={"height": 960, "width": 960}),
        tokenizer=Owlv2Processor.from_pretrained(owl).tokenizer,
    ).save_pretrained(owl)
    torch.manual_seed(0)
    Owlv2ForObjectDetection(
        Owlv2Config(text_config={"vocab_size": 49408}, vision_config={"image_size": 960, "patch_size": 16})
    ).save_pretrained(owl)
    gd = build_tiny_grounding_dino(root / "gd")
    GroundingDinoProcessor(
        image_processor=GroundingDinoImageProcessorPil(size={"shortest_edge": 800, "longest_edge": 1333}),
        tokenizer=GroundingDinoProcessor.from_pretrained(gd).tokenizer,
    ).save_pretrained(gd)
    GroundingDinoForObjectDetection(GroundingDinoConfig(text_config={"vocab_size": 30522})).save_pretrained(gd)
    return {"owlv2": owl, "grounding-dino": gd}


def main() -> None:
    import numpy as np
    from PIL import Image

    from sift_server.adapters.base import ExtractTask, LoadContext, Part
    from sift_server.adapters.detection import GroundingDinoAdapter, Owlv2Adapter

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)) for _ in range(8)]
    with tempfile.TemporaryDirectory() as tmp:
        folders = _build(Path(tmp))
        for name, cls in (("owlv2", Owlv2Adapter), ("grounding-dino", GroundingDinoAdapter)):
            ctx = LoadContext(path=folders[name], options={"device": "cpu"}, max_sequence_length=None, torch_threads=1)
            adapter = cls.load(ctx)
            for batch in (1, 1, 8):  # the first batch of 1 is a warm-up
                task = ExtractTask(
                    texts=[""] * batch, labels=("cat", "dog"), images=[(image,) for image in images[:batch]]
                )
                start = time.perf_counter()
                adapter.forward([Part(adapter.prepare(task), 0, batch)])
                seconds = time.perf_counter() - start
                print(f"{name} batch {batch}: {batch / seconds:.3f} images/s ({seconds:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
