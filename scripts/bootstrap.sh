#!/usr/bin/env bash
# Set up everything Sift needs in ./.venv: torch (CPU build, pinned), the server,
# the SDK and the development tools. Safe to run again: it skips work whose
# inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "sift: creating .venv with $($python_bin --version)"
  "$python_bin" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

stamp=.venv/.sift-installed
inputs=$(cat scripts/bootstrap.sh server/pyproject.toml sdk/pyproject.toml bench/pyproject.toml requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ]; then
  exit 0
fi

echo "sift: installing dependencies (first run takes a few minutes)"
python -m pip install --quiet --upgrade pip
# torch first and pinned: left to a resolver, "torch" means a multi-GB CUDA build.
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet -e ./sdk -e "./server[extract,rerank,hybrid,lora,onnx,openvino,cluster,otel]" -e ./bench -r requirements-dev.txt
# PyLate, the ColBERT reference of the parity tests, pins sentence-transformers 5.3 and
# transformers <= 5.3 (the server runs 6.x / 5.16): it gets its own folder, without
# dependencies, put first on PYTHONPATH only by the subprocess that runs it
# (tests/fixtures/pylate_reference.py). torch and the rest come from .venv.
rm -rf .venv/pylate-ref
python -m pip install --quiet --no-deps --target .venv/pylate-ref \
  "pylate==1.6.0" "sentence-transformers==5.3.0" "transformers==5.3.0" "tokenizers==0.22.2"
# The released SIE SDK (it needs Python 3.12) and the OpenAI client, for the black-box
# compatibility test (tests/compat): a venv of their own, nothing of Sift's in it.
# Without that interpreter the test is skipped.
py312="${SIFT_PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python3.12}"
if [ -x "$py312" ]; then
  rm -rf .venv/sie-compat
  "$py312" -m venv .venv/sie-compat
  .venv/sie-compat/bin/python -m pip install --quiet "sie-sdk==0.10.1" "openai==3.57.0"
fi
echo "$inputs" > "$stamp"
echo "sift: environment ready in .venv"
