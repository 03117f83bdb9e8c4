"""Record the reference server's image and text vectors on the tiny CLIP and SigLIP
models, into tests/fixtures/image_parity.json (the parity tests compare Sift with it).

Builds the tiny models and images (tests/fixtures/tiny_images.py), starts the
released sie-server 0.10.1 from its own venv on them (CPU, offline), and runs
tests/compat/image_driver.py under that venv's Python: the released sie-sdk sends
every case. Re-record after changing the tiny models, the images or the cases:

    PYTHONPATH=server/src:sdk/src:bench/src:. SIFT_BENCH_REFERENCE_VENV=/tmp/refprobe/venv \\
        .venv/bin/python scripts/record_image_parity.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from sift_bench.arms.reference.server import (
    model_loaded,
    reference_launcher,
    reference_venv,
    serve_command,
)
from sift_server.processes import free_port, spawn, wait_ready
from tests.fixtures.image_cases import image_cases
from tests.fixtures.tiny_images import TINY_CLIP, TINY_SIGLIP, build_tiny_clip, build_tiny_siglip

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "image_parity.json"
DRIVER = ROOT / "tests" / "compat" / "image_driver.py"
ADAPTERS = {
    TINY_CLIP: ("sie_server.adapters.clip:CLIPAdapter", 24, 77),
    TINY_SIGLIP: ("sie_server.adapters.siglip.adapter:SiglipAdapter", 32, 64),
}


def _model_config(name: str, weights: Path) -> dict[str, object]:
    adapter, dims, length = ADAPTERS[name]
    return {
        "sie_id": name,
        "weights_path": str(weights),
        "inputs": {"text": True, "image": True, "audio": False, "video": False},
        "tasks": {
            "encode": {"dense": {"dim": dims}, "sparse": None, "multivector": None},
            "score": None,
            "extract": None,
        },
        "max_sequence_length": length,
        "profiles": {
            "default": {
                "max_batch_tokens": 16384,
                "adapter_path": adapter,
                "adapter_options": {"loadtime": {}, "runtime": {"normalize": True}},
            }
        },
    }


def main() -> None:
    venv = reference_venv()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders = {TINY_CLIP: build_tiny_clip(root / "clip"), TINY_SIGLIP: build_tiny_siglip(root / "siglip")}
        models = root / "models"
        models.mkdir()
        for name, folder in folders.items():
            config = _model_config(name, folder)
            (models / (name.replace("/", "__") + ".yaml")).write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = serve_command(reference_launcher(venv), port, models, list(folders), root / "cache")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "SIE_LOG_LEVEL": "WARNING"}
        server = spawn("sie-server", command, root / "server.log", env=env, own_session=True)
        try:
            wait_ready(url, [server], 300, also=lambda: all(model_loaded(url, name) for name in folders))
            cases = image_cases()
            done = subprocess.run(
                [str(venv / "bin" / "python"), str(DRIVER), url],
                input=json.dumps(cases),
                capture_output=True,
                text=True,
                timeout=600,
                env={**env, "PYTHONPATH": ""},
                check=True,
            )
        finally:
            server.stop()
            print(server.log_tail(), file=sys.stderr)
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    record = {
        "recorded_with": {"sie_server": "0.10.1", "sie_sdk": answers.pop("sie_sdk_version")},
        "answers": answers,
    }
    FIXTURE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE} ({len(answers)} cases)")


if __name__ == "__main__":
    main()
