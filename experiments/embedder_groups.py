"""The embedder's forward by groups of similar length against one padded call,
in process (issue 20, round 4): the call cost ``backends.call_cost`` measures on
the runner (three times), then batches of 8 and 32 of the request-cost
benchmark's sentences, ungrouped and grouped (``buckets.run_grouped``),
``process_time`` best of two passes over 20 batches, and the largest difference
between the two outputs.

    taskset -c 1 python experiments/embedder_groups.py onnx|openvino GRAPH TOKENIZER_FOLDER
    (GRAPH: an exported model.onnx or model.xml from the artifact cache; CC=N: use N
    tokens as the call cost instead of the measured one)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from request_cost import sentences

from sift_server.adapters._tokenize import load_tokenizer, pad_rows
from sift_server.adapters.backends import buckets, call_cost
from sift_server.adapters.backends.request import Choice
from sift_server.adapters.backends.runners import OnnxRunner, OpenVinoRunner


def main() -> None:
    kind, graph, folder = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    runner = (
        OnnxRunner(graph, Choice("onnx", "fp32"), 1)
        if kind == "onnx"
        else OpenVinoRunner(graph, Choice("openvino", "fp32"), 1)
    )
    rows_all = load_tokenizer(folder).ids(sentences(), 256)
    base = rows_all[5]

    def run(rows: int, length: int) -> None:
        ids, mask = pad_rows([(base * 10)[:length]] * rows, 0)
        runner({"input_ids": ids, "attention_mask": mask})

    started = time.perf_counter()
    measured = [call_cost.measure(run) for _ in range(3)]
    print("call cost", measured, f"{(time.perf_counter() - started) / 3:.3f}s each")
    cost = int(os.environ.get("CC", sorted(c or 0 for c in measured)[1]))

    def pooled(feed: dict[str, np.ndarray]) -> np.ndarray:
        mask = feed["attention_mask"]
        return (runner(feed) * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)

    def forward(rows: list[list[int]], grouped: bool) -> np.ndarray:
        ids, mask = pad_rows(rows, 0)
        feed = {"input_ids": ids, "attention_mask": mask}
        if not grouped:
            return pooled(feed)
        return buckets.run_grouped(pooled, feed, "attention_mask", ("input_ids", "attention_mask"), cost)

    rng = np.random.default_rng(1)
    for size in (8, 32):
        batches = [[rows_all[i] for i in rng.choice(64, size, replace=False)] for _ in range(20)]
        times: dict[bool, list[float]] = {False: [], True: []}
        for grouped in (False, True, False, True):
            began = time.process_time()
            for batch in batches:
                forward(batch, grouped)
            times[grouped].append((time.process_time() - began) / len(batches) * 1e3)
        diff = max(float(np.abs(forward(b, True) - forward(b, False)).max()) for b in batches)
        groups = np.mean([len(buckets.plan([len(r) for r in b], cost)) for b in batches])
        one, split = min(times[False]), min(times[True])
        print(
            f"batch {size}: ungrouped {one:.2f} ms, grouped {split:.2f} ms, groups {groups:.1f}, "
            f"ratio {split / one:.2f}, max abs diff {diff:.2e}"
        )


if __name__ == "__main__":
    main()
