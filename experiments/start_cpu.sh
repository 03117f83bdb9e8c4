#!/bin/bash
# CPU seconds and wall time of a tiny `sift serve` (2-layer BERT embedder, PyTorch first) until
# /readyz answers, and which of scikit-learn, SciPy, pandas and PyArrow its process has mapped
# (docs/benchmarks/test-suite.md, session 9).
# Usage: flock -x /tmp/sift-cpu.lock experiments/start_cpu.sh TREE   (TREE: a checkout whose server/src runs)
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD TREE=$1
WORK=${TMPDIR:-/tmp}/request_cost
PORT=18801
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ ! -d "$WORK/catalog" ]; then
  PYTHONPATH=$ROOT .venv/bin/python -c "import sys; from pathlib import Path; \
from tests.fixtures.tiny_embedder import build_tiny_embedder, write_catalog_entry as w; \
r = Path(sys.argv[1]); w(r / 'catalog', build_tiny_embedder(r / 'model', hidden=64))" "$WORK"
fi
started=$(date +%s.%N)
(cd "$TREE" && PYTHONPATH=$TREE/server/src exec taskset -c 0 "$ROOT/.venv/bin/python" -m sift_server serve \
  --catalog "$WORK/catalog" --model tiny/embedder --port $PORT --log-level warning > "$WORK/start-cpu.log" 2>&1) &
pid=$!
for _ in $(seq 1 1200); do curl -sf localhost:$PORT/readyz >/dev/null && break; sleep 0.05; done
ready=$(date +%s.%N)
read -r user sys < <(awk '{print $14, $15}' /proc/$pid/stat)
mapped=$(for m in sklearn scipy pandas pyarrow; do echo -n "$m=$(grep -c "/$m" /proc/$pid/maps) "; done)
echo "wall $(echo "$ready - $started" | bc) s, cpu $(echo "($user + $sys) / $(getconf CLK_TCK)" | bc -l | cut -c1-5) s; mapped: $mapped"
kill $pid; wait $pid 2>/dev/null
