"""Time two exported GLiClass ONNX graphs against each other on the same padded batches
(docs/benchmarks/backends.md, "AVX2-only, emulated in full"): the full forward and the one
with the last encoder layer at the read positions only.

    python experiments/gliclass_graph_ab.py FULL.onnx PRUNED.onnx ROWS   (pin it: taskset -c 0)

The bench's 256 sentences with its six labels, rendered as the gliclass pipeline does, padded
batches of ROWS, one thread, 5 interleaved rounds; prints the largest logit difference and the
median items/s of each."""

from __future__ import annotations

import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from sift_bench.heads import GLICLASS_LABELS
from sift_bench.workload import make_texts

TOKENIZER = "~/.cache/sift/bench-heads/gliclass-minilm/tokenizer.json"


def session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("optimization.disable_specified_optimizers", "SkipLayerNormFusion")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main() -> None:
    import os

    sessions = [session(path) for path in sys.argv[1:3]]
    rows = int(sys.argv[3])
    tokenizer = Tokenizer.from_file(os.path.expanduser(TOKENIZER))
    tokenizer.enable_padding()
    prefix = "".join(f"<<LABEL>>{label}" for label in GLICLASS_LABELS) + "<<SEP>>"
    texts = make_texts(256, seed=0)
    feeds = []
    for start in range(0, len(texts), rows):
        encoded = tokenizer.encode_batch([prefix + text for text in texts[start : start + rows]])
        ids = np.array([e.ids for e in encoded], np.int64)
        feeds.append(
            {
                "input_ids": ids,
                "attention_mask": np.array([e.attention_mask for e in encoded], np.int64),
                "token_type_ids": np.zeros_like(ids),
                "class_slots": np.zeros((len(encoded), len(GLICLASS_LABELS)), np.int64),
            }
        )
    first = [s.run(None, feeds[0])[0] for s in sessions]
    print("largest logit difference", float(np.abs(first[0] - first[1]).max()))
    times: list[list[float]] = [[], []]
    for _ in range(5):
        for k, s in enumerate(sessions):
            start_time = time.perf_counter()
            for feed in feeds:
                s.run(None, feed)
            times[k].append(time.perf_counter() - start_time)
    full, pruned = (sorted(t)[2] for t in times)
    rate = len(texts)
    print(f"rows {rows}: full {rate / full:.1f} items/s, pruned {rate / pruned:.1f} items/s, x{full / pruned:.3f}")


if __name__ == "__main__":
    main()
