"""OpenVINO's forward for a (rows, tokens) shape met for the first time against the same call repeated
(MiniLM fp32, one core): what a server that keeps meeting new shapes pays (docs/benchmarks/request-cost.md).

    taskset -c 1 python experiments/openvino_shape_cache.py CATALOG_DIR MODEL

CATALOG_DIR holds an entry MODEL with ``backend: openvino`` and ``precision: fp32``."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import numpy as np

from sift_server.registry.catalog import Catalog
from sift_server.registry.loader import load_adapter


def main() -> None:
    adapter = load_adapter(Catalog.from_dirs([Path(sys.argv[1])]).get(sys.argv[2]), torch_threads=1)
    runner = adapter.runner  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)

    def feed(rows: int, tokens: int) -> dict[str, np.ndarray]:
        ids = rng.integers(1000, 20000, size=(rows, tokens)).astype(np.int64)
        ids[:, 0], ids[:, -1] = 101, 102
        ones = np.ones((rows, tokens), dtype=np.int64)
        return {"input_ids": ids, "attention_mask": ones, "token_type_ids": np.zeros_like(ones)}

    def timed(inputs: dict[str, np.ndarray]) -> float:
        started = time.perf_counter()
        runner(inputs)
        return time.perf_counter() - started

    timed(feed(4, 16))
    shapes = [(rows, tokens) for rows in (3, 5, 7, 9, 11, 13) for tokens in (19, 23, 27, 31, 35, 39, 43)]
    random.Random(1).shuffle(shapes)
    ratios, repeated = [], []
    for rows, tokens in shapes:
        inputs = feed(rows, tokens)
        first = timed(inputs)
        best = min(timed(inputs), timed(inputs))
        ratios.append(first / best)
        repeated.append(best * 1000)
    print(
        f"first / repeated: median {np.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f} "
        f"over {len(shapes)} shapes; repeated call median {np.median(repeated):.1f} ms"
    )


if __name__ == "__main__":
    main()
