"""Measure the ``gliner`` adapter on each backend (docs/benchmarks/backends.md, GLiNER).

    python experiments/measure_gliner_backends.py folder DEST
    python experiments/measure_gliner_backends.py inprocess --folder DEST [--rounds 5] [--batch 8] [--texts 256]
        [--choices torch/fp32,onnx/fp32@none,onnx/fp32,onnx/fp32@96]
    python experiments/measure_gliner_backends.py auto --folder DEST [--rechoose]

``folder`` writes a MiniLM-sized GLiNER: a uni-encoder span GLiNER whose encoder is
the real all-MiniLM-L6-v2 (packaged, offline) under a randomly initialised GLiNER
head. Its entities mean nothing, but every forward costs what a MiniLM-sized
GLiNER's costs. It is the bench's ``--head gliner`` (``sift_bench.heads``), which
``sift bench`` keeps under ~/.cache/sift/bench-heads/gliner-minilm.

``inprocess`` loads the adapter once per backend (explicit backend and precision:
no auto), then runs interleaved rounds over varied sentences from the bench's
workload, ``--batch`` texts per adapter call (prepare + forward: the library's word
splitting, collation and span decoding included, as served), each backend in turn,
and prints the median items/s and how the spans compare with PyTorch fp32's over
all texts. ``--choices`` lists what runs: ``backend/precision``, optionally
``@N`` (a runtime's texts grouped by length with a call costing N tokens, instead
of ``CALL_COST_TOKENS``) or ``@none`` (one padded library call per batch, as
before the grouping). Pin it (``taskset -c 0``); every backend runs one thread.

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

CHOICES = "torch/fp32,onnx/fp32,openvino/fp32,openvino/bf16,onnx/int8"
# A call cost no group split can beat: one padded call per batch (batches of at most 32).
UNGROUPED = 10**9
LABELS = ["person", "location", "organization", "date"]


def build_folder(args: argparse.Namespace) -> int:
    from sift_bench.heads import build_gliner

    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    build_gliner(dest)
    print(dest)
    return 0


def _variants(spec: str) -> dict[str, tuple[str, str, int | None]]:
    """``--choices`` → name: (backend, precision, call cost or None for the default)."""
    out: dict[str, tuple[str, str, int | None]] = {}
    for item in spec.split(","):
        choice, _, cost = item.strip().partition("@")
        backend, _, precision = choice.partition("/")
        out[item.strip()] = (backend, precision, None if not cost else UNGROUPED if cost == "none" else int(cost))
    return out


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
    from sift_server.adapters.backends import gliner as runtimes

    default_cost = runtimes.CALL_COST_TOKENS
    texts = make_texts(args.texts, seed=0)
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    folder = Path(args.folder)
    variants = _variants(args.choices)
    loaded = {(b, p): _adapter(folder, b, p) for b, p, _ in variants.values()}
    adapters = {name: loaded[(b, p)] for name, (b, p, _) in variants.items()}

    def run_all(name: str) -> list[Any]:
        cost = variants[name][2]
        runtimes.CALL_COST_TOKENS = default_cost if cost is None else cost
        return [s for batch in batches for s in _run(adapters[name], batch)]

    outputs = {name: run_all(name) for name in adapters}
    reference = outputs.get("torch/fp32") or next(iter(outputs.values()))
    agreement = {name: _compare(got, reference) for name, got in outputs.items()}
    rates: dict[str, list[float]] = {name: [] for name in adapters}
    for _ in range(args.rounds):
        for name in adapters:  # interleaved: drift hits every backend alike
            start = time.perf_counter()
            run_all(name)
            rates[name].append(len(texts) / (time.perf_counter() - start))
    base = statistics.median(next(iter(rates.values())))
    first = next(iter(rates))
    print(f"| backend | items/s batch {args.batch} | x {first} | texts with {first}'s spans | max score diff |")
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
    p.add_argument("--choices", default=CHOICES, help="backend/precision[@N|@none], comma-separated; first is the base")
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
