"""Measure the ``gliclass`` adapter on each backend (docs/benchmarks/backends.md, GLiClass).

    python experiments/measure_gliclass_backends.py inprocess --root DIR [--rounds 5] [--batch 8] [--texts 256]
        [--choices torch/fp32,onnx/fp32,openvino/fp32]
    python experiments/measure_gliclass_backends.py auto --root DIR [--rechoose]

The model is the bench's MiniLM-sized GLiClass head (``sift bench --head
gliclass``: a uni-encoder GLiClass on the packaged all-MiniLM-L6-v2, built under
``DIR`` once), with the bench's six labels on every text.

``inprocess`` loads the adapter once per backend (explicit backend and precision:
no auto), then runs interleaved rounds over varied sentences from the bench's
workload, ``--batch`` texts per adapter call (prepare + forward: rendering,
tokenizing and decoding included, as served), each backend in turn, and prints
the median items/s and how the classifications compare with PyTorch fp32's
(identical label order, largest score difference). Pin it (``taskset -c 0``);
every backend runs one thread.

``auto`` loads the adapter with ``backend: auto`` (one thread), as ``sift serve``
would, and prints the load time and its ``runtime`` (what ``/v1/models`` shows).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

CHOICES = [("torch", "fp32"), ("onnx", "fp32"), ("openvino", "fp32"), ("openvino", "bf16"), ("onnx", "int8")]


def _folder(root: str) -> tuple[Path, list[str]]:
    from sift_bench.heads import build

    _, _, labels = build("gliclass", Path(root))
    return Path(root) / "gliclass-minilm", labels


def _adapter(folder: Path, backend: str, precision: str | None, rechoose: bool = False) -> Any:
    from sift_server.adapters.base import LoadContext
    from sift_server.adapters.gliclass_classifier import GliClassAdapter

    ctx = LoadContext(
        path=folder,
        options={"device": "cpu"},
        max_sequence_length=256,
        torch_threads=1,
        backend=backend,
        precision=precision,
        rechoose_backend=rechoose,
    )
    return GliClassAdapter.load(ctx)


def _run(adapter: Any, texts: list[str], labels: list[str]) -> list[list[tuple[str, float]]]:
    from sift_server.adapters.base import ExtractTask, Part

    prepared = adapter.prepare(ExtractTask(texts=texts, labels=labels))
    [items] = adapter.forward([Part(prepared, 0, len(texts))])
    return [[(c["label"], float(c["score"])) for c in item["classifications"]] for item in items]


def _compare(got: list[Any], reference: list[Any]) -> dict[str, Any]:
    same = [[c[0] for c in a] == [c[0] for c in b] for a, b in zip(got, reference, strict=True)]
    diffs = [
        abs(x[1] - y[1]) for a, b, ok in zip(got, reference, same, strict=True) if ok for x, y in zip(a, b, strict=True)
    ]
    return {"texts_with_identical_order": sum(same), "texts": len(same), "max_score_diff": max(diffs, default=0.0)}


def inprocess(args: argparse.Namespace) -> int:
    from sift_bench.workload import make_texts

    folder, labels = _folder(args.root)
    texts = make_texts(args.texts, seed=0)
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    choices = [tuple(c.split("/")) for c in args.choices.split(",")] if args.choices else CHOICES
    adapters = {f"{b}/{p}": _adapter(folder, b, p) for b, p in choices}
    outputs = {name: [c for batch in batches for c in _run(a, batch, labels)] for name, a in adapters.items()}
    agreement = {name: _compare(got, outputs["torch/fp32"]) for name, got in outputs.items()}
    rates: dict[str, list[float]] = {name: [] for name in adapters}
    for _ in range(args.rounds):
        for name, adapter in adapters.items():  # interleaved: drift hits every backend alike
            start = time.perf_counter()
            for batch in batches:
                _run(adapter, batch, labels)
            rates[name].append(len(texts) / (time.perf_counter() - start))
    base = statistics.median(rates["torch/fp32"])
    print(f"| backend | items/s batch {args.batch} | x torch fp32 | texts in torch's order | max score diff |")
    print("|---|---|---|---|---|")
    rows = []
    for name, adapter in adapters.items():
        median = statistics.median(rates[name])
        runtime = adapter.info.runtime
        a = agreement[name]
        label = f"{name} (runs {runtime['backend']}/{runtime['precision']})"
        print(
            f"| {label} | {median:.1f} | {median / base:.2f} | {a['texts_with_identical_order']}/{a['texts']} "
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
    folder, _ = _folder(args.root)
    start = time.perf_counter()
    adapter = _adapter(folder, "auto", None, rechoose=args.rechoose)
    print(f"loaded in {time.perf_counter() - start:.1f} s")
    print(json.dumps(adapter.info.runtime, indent=1, default=str))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inprocess")
    p.add_argument("--root", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--texts", type=int, default=256)
    p.add_argument("--json")
    p.add_argument("--choices", help="comma-separated backend/precision list, torch/fp32 first (default: all five)")
    p.set_defaults(handler=inprocess)
    p = sub.add_parser("auto")
    p.add_argument("--root", required=True)
    p.add_argument("--rechoose", action="store_true")
    p.set_defaults(handler=auto)
    args = parser.parse_args()
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
