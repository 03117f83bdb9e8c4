"""Record what the released reference server's SAM 3 adapter (sie-server 0.10.1,
``sie_server.adapters.sam3``) answers on the tiny SAM 3 model, into
tests/fixtures/sam3_parity.json (the parity tests compare Sift with it).

sie-server runs SAM 3 through transformers' ``Sam3Processor``, whose image processor
is torchvision's; torchvision does not import beside this project's CPU torch, so the
answers come from a separate, throwaway environment: Python 3.12 with torch,
torchvision and transformers 5.16.1, and the sie-server 0.10.1 wheel's source on
``PYTHONPATH`` (its ``sam3`` adapter and ``DetectionPreprocessor`` need nothing else
of the server). Made once, outside the repository, e.g.:

    python3.12 -m venv /tmp/sam3venv312
    /tmp/sam3venv312/bin/pip install torch==2.14.1 torchvision==0.29.1 transformers==5.16.1 \\
        pillow numpy msgspec msgpack aiohttp
    pip download --no-deps sie-server==0.10.1 sie-sdk==0.10.1 -d /tmp/sam3ref  # then unzip both there

Then, from the repository root:

    PYTHONPATH=server/src:. .venv/bin/python scripts/record_sam3_parity.py \\
        --python /tmp/sam3venv312/bin/python --sie-server /tmp/sam3ref

The driver (scripts/sam3_parity_driver.py) loads the adapter at float32 on the CPU,
runs each case's images through the adapter's own preprocessor and ``extract``, and
prints the objects and a summary of each image's processed pixels.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import tempfile
from pathlib import Path

from tests.fixtures.sam3_cases import FIXTURE, sam3_cases
from tests.fixtures.tiny_sam3 import SAM3_SEED, build_tiny_sam3, sam3_images

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "scripts" / "sam3_parity_driver.py"
OUT = ROOT / "tests" / "fixtures" / FIXTURE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="the reference environment's python")
    parser.add_argument("--sie-server", required=True, help="folder holding the unpacked sie_server (and sie_sdk)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_sam3(Path(tmp) / "sam3")
        images = {name: (base64.b64encode(data).decode(), fmt) for name, (data, fmt) in sam3_images().items()}
        spec = {"folder": str(folder), "images": images, "cases": sam3_cases()}
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        env = os.environ | {"PYTHONPATH": args.sie_server, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        answer = subprocess.run(
            [args.python, str(DRIVER), str(spec_path)], env=env, check=True, capture_output=True, text=True
        ).stdout
    recorded = json.loads(answer)
    versions = subprocess.run(
        [
            args.python,
            "-c",
            "import torch, torchvision, transformers; "
            "print(torch.__version__, torchvision.__version__, transformers.__version__, "
            "torch.backends.cpu.get_cpu_capability())",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    fixture = {
        "reference": "sie-server 0.10.1 sie_server.adapters.sam3 (Sam3Adapter + DetectionPreprocessor), CPU, float32",
        "torch": versions[0],
        "torchvision": versions[1],
        "transformers": versions[2],
        "cpu_capability": versions[3],
        "seed": SAM3_SEED,
        **recorded,
    }
    OUT.write_text(json.dumps(fixture, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
