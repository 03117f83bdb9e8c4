"""Image encode on a CLIP-sized model: ``sift serve`` against the in-process forward.

The model is CLIP ViT-B/32 in shape (transformers' ``CLIPConfig`` defaults: a
12-layer 768-wide vision tower on 224 px in 32 px patches, a 12-layer 512-wide
text tower, 512-dimensional projection) with random weights from a fixed seed,
built offline; its forward costs what openai/clip-vit-base-patch32's costs. The
images are 640 × 480 JPEGs (quality 90), so a request also pays decoding and the
processor's resize, as a real one does.

Three figures, one intra-op thread everywhere:

- in process: ``ClipAdapter.prepare`` + ``forward`` on 1 and on 8 images (images/s);
- sequential: one client sends one image per request, waits, sends the next
  (``sift serve`` pinned to CPU 0, this client to CPU 1): images/s;
- bursts of 8: 8 one-image requests sent at once after an idle gap; how many
  forwards each burst took (from ``--trace-file``) and the burst's images/s.

    PYTHONPATH=server/src:sdk/src:bench/src flock -x /tmp/sift-cpu.lock \\
        .venv/bin/python experiments/bench_images.py [--sequential 40] [--bursts 8]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "bench/clip-b32-random"
SEED = 0


def build_clip_b32(folder: Path) -> Path:
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    from tests.fixtures.tiny_images import build_tiny_clip

    build_tiny_clip(folder)  # its tokenizer files; the model is replaced below
    tokenizer = CLIPProcessor.from_pretrained(folder).tokenizer
    config = CLIPConfig(
        text_config={"vocab_size": len(tokenizer), "eos_token_id": tokenizer.eos_token_id, "pad_token_id": 0}
    )
    torch.manual_seed(SEED)
    CLIPModel(config).eval().save_pretrained(folder)
    processor = CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224})
    CLIPProcessor(image_processor=processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def photo(seed: int) -> bytes:
    """A 640 × 480 JPEG: smooth gradients and some noise, about the size of a photo."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:480, 0:640]
    base = np.stack([x / 640 * 255, y / 480 * 255, (x + y) / 1120 * 255], axis=-1)
    pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def in_process(folder: Path, images: list[bytes], seconds: float = 5.0) -> dict[str, float]:
    from sift_server.adapters.base import EncodeTask, LoadContext, Part
    from sift_server.adapters.clip import ClipAdapter
    from sift_server.service.images import RawImage, decode_images

    adapter = ClipAdapter.load(
        LoadContext(path=folder, options={"device": "cpu"}, max_sequence_length=None, torch_threads=1)
    )
    out: dict[str, float] = {}
    for size in (1, 8):
        raws = [(RawImage(images[i % len(images)], "jpeg", "x"),) for i in range(size)]

        def once(size: int = size, raws: list[tuple[RawImage]] = raws) -> None:
            task = EncodeTask(texts=[""] * size, images=decode_images(raws, 10**8))
            prepared = adapter.prepare(task)
            adapter.forward([Part(prepared, 0, size)])

        once()
        runs, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            once()
            runs += 1
        out[f"images_per_s_batch_{size}"] = runs * size / (time.perf_counter() - started)
    return out


def post(client: Any, image: bytes) -> None:
    body = msgpack.packb({"items": [{"images": [{"data": image, "format": "jpeg"}]}]}, use_bin_type=True)
    response = client.post(f"/v1/encode/{MODEL}", content=body, headers={"Content-Type": "application/msgpack"})
    assert response.status_code == 200, response.text


async def burst(url: str, images: list[bytes]) -> float:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def one(image: bytes) -> None:
            body = msgpack.packb({"items": [{"images": [{"data": image, "format": "jpeg"}]}]}, use_bin_type=True)
            response = await client.post(
                f"/v1/encode/{MODEL}", content=body, headers={"Content-Type": "application/msgpack"}
            )
            assert response.status_code == 200, response.text

        await one(images[0])  # the connection pool warm
        await asyncio.sleep(0.3)
        started = time.perf_counter()
        await asyncio.gather(*(one(image) for image in images))
        return time.perf_counter() - started


def served(folder: Path, root: Path, images: list[bytes], sequential: int, bursts: int) -> dict[str, Any]:
    import httpx

    from sift_server.engine.trace import read_trace
    from sift_server.processes import free_port, offline_env, sift_command, spawn, wait_ready

    catalog = root / "catalog"
    catalog.mkdir()
    (catalog / "clip.yaml").write_text(f"name: {MODEL}\nadapter: clip\nsource:\n  path: {folder}\ntasks: [encode]\n")
    trace = root / "trace.jsonl"
    port = free_port()
    command = [
        "taskset", "-c", "0", *sift_command(), "serve", "--port", str(port), "--catalog", str(catalog),
        "--model", MODEL, "--torch-threads", "1", "--no-calibrate", "--trace-file", str(trace),
    ]  # fmt: skip
    server = spawn("sift serve", command, root / "serve.log", env=offline_env())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, [server], 300)
        with httpx.Client(base_url=url, timeout=120) as client:
            for image in images[:3]:
                post(client, image)  # warm-up
            started = time.perf_counter()
            for i in range(sequential):
                post(client, images[i % len(images)])
            sequential_s = time.perf_counter() - started
        burst_s: list[float] = []
        # Per burst, the items of each forward it ran as (the first record after the
        # burst starts is its client's warm-up request, one item alone).
        burst_forwards: list[list[int]] = []
        for b in range(bursts):
            seen = len(read_trace(trace))
            burst_s.append(asyncio.run(burst(url, [images[(b + i) % len(images)] for i in range(8)])))
            burst_forwards.append([r.items for r in read_trace(trace)[seen + 1 :]])
    finally:
        server.stop()
    return {
        "sequential_images_per_s": sequential / sequential_s,
        "burst_of_8_seconds_median": statistics.median(burst_s),
        "burst_of_8_images_per_s_median": 8 / statistics.median(burst_s),
        "items_per_forward_of_each_burst": burst_forwards,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequential", type=int, default=40)
    parser.add_argument("--bursts", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = build_clip_b32(root / "clip-b32")
        images = [photo(seed) for seed in range(16)]
        os.sched_setaffinity(0, {0})
        inproc = in_process(folder, images)
        os.sched_setaffinity(0, {1})
        server = served(folder, root, images, args.sequential, args.bursts)
    flags = Path("/proc/cpuinfo").read_text()
    result = {
        "model": "CLIP ViT-B/32 shapes, random weights; 640x480 JPEG q90 per request; 1 thread",
        "cpu_flags": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags],
        "in_process": inproc,
        "server": server,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
