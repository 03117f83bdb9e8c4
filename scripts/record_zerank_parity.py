"""Record tests/adapters/parity/zerank_reference.json once: the released sie-server 0.10.1's
answers to the zerank-2 parity cases (tests/adapters/parity/decoder_cases.py) on the tiny
zerank folder (tests/fixtures/tiny_decoder.py, fixed seed), through sie-sdk 0.10.1.

    PYTHONPATH=server/src:sdk/src:bench/src:. HF_HUB_OFFLINE=1 \\
        .venv/bin/python scripts/record_zerank_parity.py [--venv ~/.cache/sift/reference-venv]

The reference venv (``sift bench reference-setup``) runs the catalog's own adapter,
``native_causal_cross_encoder`` (sentence-transformers 5.7's CrossEncoder), on the CPU,
offline, in float32 (the shipped profile's bfloat16 is a GPU setting), with the entry's
limit set to the tiny entry's ``max_sequence_length``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from sift_bench.arms.reference.server import model_loaded, reference_launcher, reference_venv, serve_command
from sift_server.processes import free_port, spawn, wait_ready
from tests.adapters.parity.decoder_cases import ZERANK_FIXTURE, ZERANK_MAX_SEQ, ZERANK_RERANKER, ZERANK_SCORE_CASES
from tests.fixtures.tiny_decoder import build_tiny_zerank

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "scripts" / "decoder_parity_driver.py"
OUT = ROOT / "tests" / "adapters" / "parity" / ZERANK_FIXTURE
ADAPTER = "sie_server.adapters.native_causal_cross_encoder.adapter:NativeCausalCrossEncoderAdapter"


def _config(weights: Path) -> dict[str, Any]:
    return {
        "sie_id": ZERANK_RERANKER,
        "weights_path": str(weights),
        "inputs": {"text": True, "image": False, "audio": False, "video": False},
        "tasks": {"encode": None, "score": {}, "extract": None},
        "max_sequence_length": ZERANK_MAX_SEQ,
        "profiles": {
            "default": {
                "max_batch_tokens": 32768,
                "compute_precision": "float32",
                "adapter_path": ADAPTER,
                "adapter_options": {"loadtime": {}, "runtime": {}},
            }
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=reference_venv())
    args = parser.parse_args()
    python = args.venv / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="zerank-parity-") as tmp:
        root = Path(tmp)
        models = root / "models"
        models.mkdir()
        config = _config(build_tiny_zerank(root / "zerank"))
        (models / (ZERANK_RERANKER.replace("/", "__") + ".yaml")).write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = serve_command(reference_launcher(args.venv), port, models, [ZERANK_RERANKER], root / "cache")
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "SIE_LOG_LEVEL": "WARNING",
        }
        env.pop("PYTHONPATH", None)
        server = spawn("sie-server", command, root / "server.log", env=env, own_session=True)
        try:
            wait_ready(url, [server], 300.0, also=lambda: model_loaded(url, ZERANK_RERANKER))
            spec = json.dumps({"embedder": "", "reranker": ZERANK_RERANKER, "embed": [], "score": ZERANK_SCORE_CASES})
            out = subprocess.run(
                [str(python), str(DRIVER), url, spec], env=env, capture_output=True, text=True, check=True, timeout=600
            )
            answers = json.loads(out.stdout)["score"]
        finally:
            server.stop()
        versions = subprocess.run(
            [str(python), "-c", "import sie_server, sentence_transformers as st; print(st.__version__)"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    if any(name not in answers for name in (case["name"] for case in ZERANK_SCORE_CASES)):
        sys.exit(f"the reference did not answer every case: {answers}")
    fixture = {
        "recorded_with": f"sie-server 0.10.1 ({ADAPTER}, sentence-transformers {versions}, float32, CPU) "
        "and sie-sdk 0.10.1 (scripts/record_zerank_parity.py)",
        "score": answers,
    }
    OUT.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
