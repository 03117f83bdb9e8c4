"""Where the engine's cut by length (``engine.padding``, with the fixed part
from the load-time calibration curve) leaves padding that the embedder's own
grouping (``buckets``, with the call cost measured on its runner) removes, on
batches of 8 and 32 of the request-cost benchmark's sentences (issue 20, round 4).

    SIFT_BACKEND=onnx:fp32 taskset -c 1 python experiments/engine_cut_groups.py CATALOG_ENTRY.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from request_cost import sentences

from sift_server.adapters.backends import buckets
from sift_server.adapters.base import EncodeTask
from sift_server.engine import padding
from sift_server.engine.forward_cost import ForwardCost
from sift_server.registry import calibrate
from sift_server.registry.catalog import load_spec
from sift_server.registry.loader import load_adapter


def main() -> None:
    adapter = load_adapter(load_spec(Path(sys.argv[1])), 1)
    own = getattr(adapter, "call_cost_tokens", None)
    print("adapter call cost", own, adapter.info.runtime.get("backend"))
    costs = ForwardCost()
    for tokens, seconds in calibrate.measure(adapter).points:
        costs.observe(tokens, seconds)
    print("engine fixed tokens", costs.fixed_tokens)
    lengths = [len(row) for row in adapter.prepare(EncodeTask(sentences())).payload]
    rng = np.random.default_rng(0)
    for size in (8, 32):
        subs = extra = engine_padded = grouped_padded = 0
        for _ in range(200):
            batch = [lengths[i] for i in rng.choice(64, size, replace=False)]
            chunks = padding.plan(batch, costs.fixed_tokens)
            subs += len(chunks)
            for chunk in chunks:
                rows = [batch[i] for i in chunk]
                groups = buckets.plan(rows, own if own is not None else buckets.CALL_COST_TOKENS)
                extra += len(groups) - 1
                engine_padded += len(rows) * max(rows)
                grouped_padded += sum(len(g) * max(rows[i] for i in g) for g in groups)
        print(
            f"batch {size}: engine sub-forwards/batch {subs / 200:.2f}, adapter extra splits/batch {extra / 200:.2f}, "
            f"padded tokens engine {engine_padded / 200:.0f} -> with adapter {grouped_padded / 200:.0f}, "
            f"real {size * np.mean(lengths):.0f}"
        )


if __name__ == "__main__":
    main()
