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
# --no-compile: Python compiles what it imports on first use; compiling all of torch and
# transformers up front is most of an install's CPU time.
pip_install=(python -m pip install --quiet --no-compile)
# The two side environments below are independent of .venv's packages: they install in the
# background while the main install runs (pip uses one core; the machine has two).
side_logs=$(mktemp -d)
# PyLate, the ColBERT reference of the parity tests, pins sentence-transformers 5.3 and
# transformers <= 5.3 (the server runs 6.x / 5.16): it gets its own folder, without
# dependencies, put first on PYTHONPATH only by the subprocess that runs it
# (tests/fixtures/pylate_reference.py). torch and the rest come from .venv.
rm -rf .venv/pylate-ref
"${pip_install[@]}" --no-deps --target .venv/pylate-ref \
  "pylate==1.6.0" "sentence-transformers==5.3.0" "transformers==5.3.0" "tokenizers==0.22.2" \
  >"$side_logs/pylate.log" 2>&1 &
pylate_pid=$!
# The released SIE SDK (it needs Python 3.12) and the OpenAI client, for the black-box
# compatibility test (tests/compat): a venv of their own, nothing of Sift's in it.
# Without that interpreter the test is skipped.
py312="${SIFT_PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python3.12}"
compat_pid=""
if [ -x "$py312" ]; then
  rm -rf .venv/sie-compat
  ("$py312" -m venv .venv/sie-compat &&
    .venv/sie-compat/bin/python -m pip install --quiet --no-compile "sie-sdk==0.10.1" "openai==3.57.0") \
    >"$side_logs/compat.log" 2>&1 &
  compat_pid=$!
fi
# One resolver pass for everything; torch pinned: left to a resolver, "torch" means a
# multi-GB CUDA build.
"${pip_install[@]}" "torch==2.13.0" -e ./sdk -e "./server[extract,rerank,hybrid,lora,onnx,openvino,cluster,otel,images]" \
  -e ./bench -r requirements-dev.txt
for side in "pylate:$pylate_pid" "compat:$compat_pid"; do
  name=${side%%:*} pid=${side#*:}
  if [ -n "$pid" ] && ! wait "$pid"; then
    cat "$side_logs/$name.log" >&2
    echo "sift: the $name install failed" >&2
    exit 1
  fi
done
rm -rf "$side_logs"
echo "$inputs" > "$stamp"
echo "sift: environment ready in .venv"
