"""Nomic on one core: ``sentence-embedder`` on transformers' own ``NomicBertModel`` (prepare +
forward, PyTorch fp32) against the library's own batch call, sentence-transformers'
``SentenceTransformer.encode`` under ``trust_remote_code`` over the publisher's code (in
``sift bench reference-setup``'s environment: the same torch 2.13 CPU build and transformers
5.16.1). Each arm runs in its own process pinned to the same core with one torch thread; rounds
alternate the arms.

The model is a random folder in the published Nomic layout (tests/fixtures/tiny_nomic.py) of
MiniLM-like width (hidden 384, 6 layers, 6 heads, MLP 1536; weights random: timing only, no
hub). Items: documents of two sentences (some 40 tokens with the ``search_document: `` prefix).
Prints and writes, per arm and batch size (1, 8, 32), items/s (median over rounds) and the
per-call latency distribution (p50/p90/p99/max over every round's calls):

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_nomic.py --code /path/to/publisher-files \\
        --python ~/.cache/sift/reference-venv/bin/python [--rounds 3] [--core 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (1, 8, 32)
DOCUMENT = (
    "The European segment grew its revenue by eight percent in the third quarter. "
    "Margins improved as input costs fell and the outlook for the year was raised."
)
PREFIX = "search_document: "
CALLS = {1: 40, 8: 12, 32: 5}


def build(root: Path, code: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.tiny_nomic import build_tiny_nomic, nomic_config

    config = nomic_config(n_embd=384, n_layer=6, n_head=6, n_inner=1536)
    native = build_tiny_nomic(root / "native", config=config, weights_for=config)
    (native / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512}))
    publisher = root / "publisher"
    shutil.copytree(native, publisher, dirs_exist_ok=True)
    for name in ("configuration_hf_nomic_bert.py", "modeling_hf_nomic_bert.py"):
        shutil.copy2(code / name, publisher / name)
    config["auto_map"] = {key: value.split("--", 1)[1] for key, value in config["auto_map"].items()}
    (publisher / "config.json").write_text(json.dumps(config))
    return native, publisher


def _timed(call: Any, batch: int) -> dict[str, Any]:
    texts = [DOCUMENT] * batch
    call(texts)  # warm-up
    latencies = []
    for _ in range(CALLS[batch]):
        start = time.perf_counter()
        call(texts)
        latencies.append(time.perf_counter() - start)
    return {"items_per_s": batch * len(latencies) / sum(latencies), "latencies_s": latencies}


def arm_sift(folder: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from sift_server.adapters.base import EncodeTask, LoadContext, Part
    from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter

    options = {"device": "cpu", "document_prefix": PREFIX}
    adapter = SentenceEmbedderAdapter.load(
        LoadContext(path=Path(folder), options=options, max_sequence_length=None, torch_threads=1)
    )

    def call(texts: list[str]) -> object:
        prepared = adapter.prepare(EncodeTask(texts=texts))
        return adapter.forward([Part(prepared, 0, len(texts))])

    return {str(batch): _timed(call, batch) for batch in BATCHES}


def arm_reference(folder: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu", trust_remote_code=True, local_files_only=True)

    def call(texts: list[str]) -> object:
        return model.encode([PREFIX + text for text in texts], batch_size=len(texts), normalize_embeddings=True)

    return {str(batch): _timed(call, batch) for batch in BATCHES}


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000

    return {"p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "max_ms": ordered[-1] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--code", type=Path, required=True)
    parser.add_argument("--python", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "nomic-inprocess.json")
    parser.add_argument("--work", type=Path, default=Path("/tmp/sift-nomic-bench"))
    args = parser.parse_args()
    native, publisher = build(args.work, args.code)
    arms = {"sift": (sys.executable, native), "reference": (str(args.python), publisher)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    for _ in range(args.rounds):
        for name, (python, folder) in arms.items():
            code = f"import sys, json; sys.path.insert(0, {str(ROOT / 'scripts')!r}); import bench_nomic as b; "
            code += f"print(json.dumps(b.arm_{name}({str(folder)!r})))"
            done = subprocess.run(
                ["taskset", "-c", str(args.core), python, "-c", code],
                capture_output=True, text=True, check=False, env=env,
            )  # fmt: skip
            if done.returncode:
                sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    result: dict[str, Any] = {"command": " ".join(sys.argv), "core": args.core, "rounds": args.rounds, "arms": {}}
    for name, rounds in runs.items():
        result["arms"][name] = {
            str(batch): {
                "items_per_s": statistics.median(r[str(batch)]["items_per_s"] for r in rounds),
                **_percentiles([lat for r in rounds for lat in r[str(batch)]["latencies_s"]]),
            }
            for batch in BATCHES
        }
    for batch in BATCHES:
        sift, ref = result["arms"]["sift"][str(batch)], result["arms"]["reference"][str(batch)]
        ratio = sift["items_per_s"] / ref["items_per_s"]
        print(
            f"batch {batch:2d}: sift {sift['items_per_s']:8.1f}/s  reference {ref['items_per_s']:8.1f}/s  ×{ratio:.2f}"
        )
        result.setdefault("ratio", {})[str(batch)] = ratio
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
