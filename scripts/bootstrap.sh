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

echo "sift: installing dependencies (first run takes a minute or two)"
# uv (PyPI's `uv`, a pip-compatible installer that downloads and unpacks in parallel) cuts the
# install from about a minute to seconds; without it (SIFT_NO_UV=1, or no registry) pip does it.
# --no-compile for pip: Python compiles what it imports on first use; compiling all of torch
# and transformers up front is most of an install's CPU time (uv never compiles unless asked).
installer=(python -m pip install --quiet --no-compile)
venv_for() { "$1" -m venv "$2"; }
if [ -z "${SIFT_NO_UV:-}" ] && python -m pip install --quiet "uv==0.13.9" >/dev/null 2>&1; then
  # uv does not read pip's configuration: hand it the indexes, links and constraints pip uses
  # here, and pip's rule of taking the best version across all indexes.
  uv_args=(--quiet --index-strategy unsafe-best-match)
  while IFS= read -r line; do
    key=${line%%=*} value=${line#*=}
    value=${value#\'} value=${value%\'}
    for item in $value; do
      case ${key##*.} in
        index-url) uv_args+=(--index-url "$item") ;;
        extra-index-url) uv_args+=(--extra-index-url "$item") ;;
        find-links) uv_args+=(--find-links "$item") ;;
        constraint) uv_args+=(--constraint "$item") ;;
        cert) export SSL_CERT_FILE="$item" ;;
      esac
    done
  done < <(python -m pip config list 2>/dev/null)
  installer=(.venv/bin/uv pip install "${uv_args[@]}" --python)
  venv_for() { .venv/bin/uv venv --quiet --python "$1" "$2"; }
fi
install_into() { # PYTHON, then install arguments
  local target=$1
  shift
  if [ "${installer[0]}" = python ]; then "$target" "${installer[@]:1}" "$@"; else "${installer[@]}" "$target" "$@"; fi
}
# The two side environments below are independent of .venv's packages: they install in the
# background while the main install runs.
side_logs=$(mktemp -d)
# PyLate, the ColBERT reference of the parity tests, pins sentence-transformers 5.3 and
# transformers <= 5.3 (the server runs 6.x / 5.16): it gets its own folder, without
# dependencies, put first on PYTHONPATH only by the subprocess that runs it
# (tests/fixtures/pylate_reference.py). torch and the rest come from .venv.
rm -rf .venv/pylate-ref
install_into .venv/bin/python --no-deps --target .venv/pylate-ref \
  "pylate==1.6.0" "sentence-transformers==5.3.0" "transformers==5.3.0" "tokenizers==0.22.2" \
  >"$side_logs/pylate.log" 2>&1 &
pylate_pid=$!
# The released SIE SDK (it needs Python 3.12), the OpenAI client, the Cohere client (its
# rerank against /v1/rerank), the nine released SIE integrations with the frameworks and
# embedded vector stores they plug into, and the SIE MCP server (sie-mcp, with the `mcp`
# client), for the black-box compatibility test (tests/compat): a venv of their own, nothing of
# Sift's in it (about 220 packages, no torch). openai stays at 2.x: crewai 1.15 (through
# instructor) takes openai < 3. Without that interpreter the test is skipped.
py312="${SIFT_PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python3.12}"
compat_pid=""
if [ -x "$py312" ]; then
  rm -rf .venv/sie-compat
  (venv_for "$py312" .venv/sie-compat &&
    install_into .venv/sie-compat/bin/python "sie-sdk==0.10.1" "openai==2.54.0" "cohere==7.3.1" \
      "sie-qdrant==0.10.1" "qdrant-client==1.20.0" "sie-chroma==0.10.1" "chromadb==1.5.9" \
      "sie-lancedb==0.10.1" "lancedb==0.40.0" "sie-weaviate==0.10.1" "weaviate-client==4.24.1" \
      "sie-langchain==0.10.1" "langchain-core==1.6.10" "sie-llamaindex==0.10.1" "llama-index-core==0.14.25" \
      "sie-haystack==0.10.1" "haystack-ai==3.4.1" "sie-dspy==0.10.1" "dspy==3.4.1" "litellm==1.110.2" \
      "sie-crewai==0.10.1" "crewai==1.15.30" "crewai-tools==1.15.30" "sie-mcp==0.10.1" "mcp==1.30.0") \
    >"$side_logs/compat.log" 2>&1 &
  compat_pid=$!
fi
# One resolver pass for everything; torch pinned: left to a resolver, "torch" means a
# multi-GB CUDA build.
install_into .venv/bin/python "torch==2.13.0" -e ./sdk \
  -e "./server[extract,glirel,rerank,hybrid,lora,onnx,openvino,cluster,otel,images,documents,generation,remote,speech,colvision,ctranslate2]" -e ./bench -r requirements-dev.txt
# docling imports these at start, whatever the format (the extra `documents` has the rest): without
# their dependencies, since docling-ibm-models' torchvision is PyPI's CUDA build (it fails to load
# beside the CPU torch and breaks transformers' image code) and docling-parse pins Pillow below 13
# (Pillow 12 decodes images differently: the CLIP parity tests fail).
install_into .venv/bin/python --no-deps "docling-ibm-models>=3.13,<4" "jsonlines>=3.1" "docling-parse>=6.2,<7"
# GLiNER2 2.x models (gliner2.5, the GLiNER2 privacy filter; adapter gliner2-v2): gliner2 2.0.0, the
# reference's release for them, in a side folder only that adapter's child process imports. The extra
# `extract` keeps 1.3.2, which the GLiNER2 v1 models need (2.x answers them differently). Its
# dependencies (pydantic, requests, tqdm, torch, transformers, safetensors, peft) are .venv's.
rm -rf .venv/sift-side/gliner2-2.0.0
install_into .venv/bin/python --no-deps --target .venv/sift-side/gliner2-2.0.0 "gliner2==2.0.0"
# colpali-engine (the colpali-engine adapter, extra `colvision`): without its dependencies, since it
# asks for torchvision (PyPI's build fails to load beside the CPU torch) and caps peft below 0.21.
install_into .venv/bin/python --no-deps "colpali-engine==0.3.18"
# Generation (docs/generation.md): xgrammar, the grammar compiler of the engine, which Sift runs to refuse
# a grammar before the engine sees it (without triton, its GPU kernels); and, for the tests only,
# optimum-intel's OpenVINO exporter (it pins transformers below 5.6; its export runs on 5.16).
install_into .venv/bin/python --no-deps "xgrammar==0.2.9" "apache-tvm-ffi==0.1.15.post2" \
  "optimum-intel==2.2.0" "optimum==2.3.0"
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
