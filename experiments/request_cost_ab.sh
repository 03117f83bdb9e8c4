#!/bin/bash
# Paired A/B/... of the server's own cost per request (issue 20), less noisy than request_cost.sh:
# one server per tree, all started at once and all pinned to CPU 0 (an idle server costs nothing),
# each settled SETTLE_S (default 20) seconds after readiness; then, ROUNDS times, every route and
# load is measured on each tree in turn for SECONDS (experiments/request_cost.py on CPU 1), so
# the trees see the same minutes of the shared machine. No server restarts between rounds.
# Usage: flock -x /tmp/sift-cpu.lock experiments/request_cost_ab.sh ROUNDS SECONDS TREE...
#        (a TREE named "floor" is experiments/floor_server.py: the floor under the figure)
#        (ROUTES="json msgpack openai" and LOADS="8 32" by default)
#        then: .venv/bin/python experiments/request_cost_summary.py OUTPUT
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=$1 SECS=$2
shift 2
WORK=${TMPDIR:-/tmp}/request_cost
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ ! -d "$WORK/catalog" ]; then
  PYTHONPATH=$ROOT .venv/bin/python -c "import sys; from pathlib import Path; \
from tests.fixtures.tiny_embedder import build_tiny_embedder, write_catalog_entry as w; \
r = Path(sys.argv[1]); w(r / 'catalog', build_tiny_embedder(r / 'model', hidden=64))" "$WORK"
fi
PIDS=() PORTS=() NAMES=()
k=0
for tree in "$@"; do
  port=$((18781 + k))
  if [ "$tree" = floor ]; then  # the floor under the figure: experiments/floor_server.py on this checkout
    (SIFT_BACKEND=onnx:fp32 PYTHONPATH=$ROOT/server/src exec taskset -c 0 "$ROOT/.venv/bin/python" \
      experiments/floor_server.py "$WORK/catalog" tiny/embedder $port > "$WORK/ab-server-$k.log" 2>&1) &
  else
    (cd "$tree" && PYTHONPATH=$tree/server/src exec taskset -c 0 "$ROOT/.venv/bin/python" -m sift_server serve \
      --catalog "$WORK/catalog" --model tiny/embedder --port $port --torch-threads 1 --log-level warning \
      > "$WORK/ab-server-$k.log" 2>&1) &
  fi
  PIDS+=($!) PORTS+=($port) NAMES+=("$(basename "$tree")")
  k=$((k + 1))
done
for port in "${PORTS[@]}"; do
  for i in $(seq 1 900); do curl -sf localhost:$port/readyz >/dev/null && break; sleep 0.1; done
done
sleep "${SETTLE_S:-20}"
for k in "${!PORTS[@]}"; do  # what each server runs (backend, and the call cost its embedder measured)
  echo "arm=${NAMES[$k]} $(curl -s localhost:${PORTS[$k]}/v1/models | grep -o '"\(backend\|call_cost_tokens\)": *"\?[a-z0-9]*' | tr -d '" ' | tr '\n' ' ')"
done
for k in "${!PORTS[@]}"; do
  .venv/bin/python experiments/request_cost.py http://127.0.0.1:${PORTS[$k]} tiny/embedder json 8 2 > /dev/null
done
for round in $(seq 1 "$ROUNDS"); do
  for route in ${ROUTES:-json msgpack openai}; do
    for n in ${LOADS:-8 32}; do
      for k in "${!PORTS[@]}"; do
        echo "round=$round arm=${NAMES[$k]} $(.venv/bin/python experiments/request_cost.py \
          http://127.0.0.1:${PORTS[$k]} tiny/embedder $route $n "$SECS" ${PIDS[$k]})"
      done
    done
  done
done
for pid in "${PIDS[@]}"; do kill $pid; wait $pid 2>/dev/null; done
