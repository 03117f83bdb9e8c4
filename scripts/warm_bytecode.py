"""Compile the bytecode of the libraries the server and the tests import, once, after an install.

Python compiles a module the first time it is imported and keeps the result in ``__pycache__``.
The bootstrap installs without compiling (most of torch and transformers is never imported),
so on a fresh clone the test suite's first minute starts dozens of interpreters that import
torch and transformers at the same time, and each compiles the same modules again until one
has written them (about a minute of CPU, measured in docs/benchmarks/test-suite.md). Importing
them here, in two processes side by side, compiles each module once.

    .venv/bin/python scripts/warm_bytecode.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

# Two groups that take about as long, run side by side: PyTorch and what builds on it; the rest.
GROUPS = (
    (
        "torch",
        "transformers",
        "transformers.modeling_utils",
        "transformers.models.auto.modeling_auto",
        "transformers.models.auto.tokenization_auto",
        "transformers.models.bert.modeling_bert",
        "transformers.models.deberta_v2.modeling_deberta_v2",
        "transformers.models.clip.modeling_clip",
        "transformers.models.siglip.modeling_siglip",
        "transformers.models.modernbert.modeling_modernbert",
        "sentence_transformers",
        "peft",
        "gliner",
        "gliclass",
        "gliner2",
    ),
    (
        "onnx",
        "onnxruntime",
        "onnxscript",
        "openvino",
        "fastapi",
        "uvicorn",
        "httpx",
        "nats",
        "msgspec",
        "msgpack",
        "prometheus_client",
        "pydantic_settings",
        "yaml",
        "PIL.Image",
        "sklearn.metrics",
        "scipy.optimize",
        "pandas",
        "matplotlib.pyplot",
        "tqdm",
        "pytest",
    ),
)

CHILD = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:  # a missing extra: it compiles on first use instead
        failed.append(f"{name} ({type(exc).__name__})")
if failed:
    print("not compiled: " + ", ".join(failed), file=sys.stderr)
"""


def main() -> int:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("MPLBACKEND", "Agg")
    started = time.perf_counter()
    children = [subprocess.Popen([sys.executable, "-c", CHILD, *group], env=env) for group in GROUPS]
    codes = [child.wait() for child in children]
    print(f"sift: bytecode compiled in {time.perf_counter() - started:.0f} s", flush=True)
    return max(codes)


if __name__ == "__main__":
    raise SystemExit(main())
