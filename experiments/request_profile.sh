#!/bin/bash
# Where a request's CPU goes (issue 20): py-spy samples a running server (pinned to CPU 0, tiny
# 2-layer BERT embedder, hidden 64) for 10 s of closed-loop load from experiments/request_cost.py
# (CPU 1); experiments/profile_stages.py then sums the samples per request stage.
# Usage: flock -s /tmp/sift-cpu.lock experiments/request_profile.sh TREE ROUTE IN_FLIGHT OUT.txt
#        (PYSPY_ARGS=--gil: only the thread holding the GIL, i.e. Python CPU, no waits)
#        .venv/bin/python experiments/profile_stages.py OUT.txt
# TREE: a Sift checkout whose server/src is served (this checkout's venv and py-spy are used).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD TREE=$1 ROUTE=$2 N=$3 OUT=$4
WORK=${TMPDIR:-/tmp}/request_cost
PORT=18779
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ ! -d "$WORK/catalog" ]; then
  PYTHONPATH=$ROOT .venv/bin/python -c "import sys; from pathlib import Path; \
from tests.fixtures.tiny_embedder import build_tiny_embedder, write_catalog_entry as w; \
r = Path(sys.argv[1]); w(r / 'catalog', build_tiny_embedder(r / 'model', hidden=64))" "$WORK"
fi
(cd "$TREE" && PYTHONPATH=$TREE/server/src exec taskset -c 0 "$ROOT/.venv/bin/python" -m sift_server serve \
  --catalog "$WORK/catalog" --model tiny/embedder --port $PORT --torch-threads 1 --log-level warning \
  > "$WORK/profile-server.log" 2>&1) &
SPID=$!
for i in $(seq 1 600); do curl -sf localhost:$PORT/readyz >/dev/null && break; sleep 0.1; done
.venv/bin/python experiments/request_cost.py http://127.0.0.1:$PORT tiny/embedder "$ROUTE" "$N" 2 > /dev/null
taskset -c 1 .venv/bin/py-spy record -r 200 ${PYSPY_ARGS:-} -f raw -o "$OUT" -p $SPID -d 10 > /dev/null 2>&1 &
YPID=$!
.venv/bin/python experiments/request_cost.py http://127.0.0.1:$PORT tiny/embedder "$ROUTE" "$N" 10
wait $YPID
kill -TERM $SPID; wait $SPID
