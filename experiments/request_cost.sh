#!/bin/bash
# A/B of the server's own cost per request (issue 20): a tiny 2-layer BERT embedder (hidden 64),
# the server pinned to CPU 0, experiments/request_cost.py on CPU 1; routes json, msgpack, openai at 8
# and 32 in flight; arms alternate (A B A B ...).
# Usage: flock -x /tmp/sift-cpu.lock experiments/request_cost.sh OLD_TREE NEW_TREE [ROUNDS] [SECONDS]
# Each tree is a Sift checkout; its server runs with PYTHONPATH=TREE/server/src (the venv of this one).
# Each server gets SETTLE_S (default 15) seconds after readiness before it is measured: `auto`'s
# background backend decision runs on the same core for the first seconds after a start.
# Besides requests/s, each line has the server's CPU time per request (server_us_per_req).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OLD=$1 NEW=$2 ROUNDS=${3:-2} SECS=${4:-8} SETTLE=${SETTLE_S:-15}
WORK=${TMPDIR:-/tmp}/request_cost
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ ! -d "$WORK/catalog" ]; then
  PYTHONPATH=$PWD .venv/bin/python - "$WORK" <<'PY'
import sys
from pathlib import Path
from tests.fixtures.tiny_embedder import build_tiny_embedder, write_catalog_entry
root = Path(sys.argv[1])
write_catalog_entry(root / "catalog", build_tiny_embedder(root / "model", hidden=64))
PY
fi
PORT=18771
for round in $(seq 1 "$ROUNDS"); do
  for arm in old new; do
    tree=$OLD; [ $arm = new ] && tree=$NEW
    (cd "$tree" && PYTHONPATH=$tree/server/src exec taskset -c 0 "$ROOT/.venv/bin/python" -m sift_server serve \
      --catalog "$WORK/catalog" --model tiny/embedder --port $PORT --torch-threads 1 --log-level warning \
      > "$WORK/server-$arm.log" 2>&1) &
    SPID=$!
    for i in $(seq 1 600); do curl -sf localhost:$PORT/readyz >/dev/null && break; sleep 0.1; done
    sleep "$SETTLE"
    .venv/bin/python experiments/request_cost.py http://127.0.0.1:$PORT tiny/embedder json 8 2 > /dev/null
    for route in json msgpack openai; do
      for n in 8 32; do
        echo "round=$round arm=$arm $(.venv/bin/python experiments/request_cost.py http://127.0.0.1:$PORT tiny/embedder $route $n "$SECS" $SPID)"
      done
    done
    kill $SPID; wait $SPID 2>/dev/null
    sleep 0.5
  done
done
