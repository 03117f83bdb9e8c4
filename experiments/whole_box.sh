#!/bin/bash
# Issue 20 item 3: one model's server on one core against the whole (unpinned) box, default
# thread counts, and where each core goes. For each mode, a fresh server: "1core" pins it to
# CPU 0 and the client (experiments/request_cost.py) to CPU 1; "box" pins neither. During each
# load, experiments/thread_cpu.py reads the server's per-thread CPU.
# Usage: flock -x /tmp/sift-cpu.lock experiments/whole_box.sh CATALOG MODEL SECONDS [MODES] [LOADS]
#        (MODES "1core box", LOADS "8 32" by default; SERVE_ARGS: extra `sift serve` arguments)
set -u
cd "$(dirname "$0")/.."
CATALOG=$1 MODEL=$2 SECS=$3 MODES=${4:-1core box} LOADS=${5:-8 32}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=$PWD/.venv/bin/python
PORT=18799
for mode in $MODES; do
  if [ "$mode" = 1core ]; then PIN="taskset -c 0"; CLIENT=1; else PIN=""; CLIENT=none; fi
  $PIN "$PY" -m sift_server serve --catalog "$CATALOG" --model "$MODEL" --port $PORT --log-level warning \
    ${SERVE_ARGS:-} > "${TMPDIR:-/tmp}/whole-box-server.log" 2>&1 &
  pid=$!
  for i in $(seq 1 1800); do curl -sf localhost:$PORT/readyz >/dev/null && break; sleep 0.1; done
  sleep "${SETTLE_S:-10}"
  REQUEST_COST_CLIENT_CPUS=$CLIENT "$PY" experiments/request_cost.py http://127.0.0.1:$PORT "$MODEL" json 8 2 > /dev/null
  for n in $LOADS; do
    "$PY" experiments/thread_cpu.py $pid "$SECS" > "${TMPDIR:-/tmp}/whole-box-threads.txt" &
    tpid=$!
    line=$(REQUEST_COST_CLIENT_CPUS=$CLIENT "$PY" experiments/request_cost.py http://127.0.0.1:$PORT "$MODEL" json $n "$SECS" $pid)
    wait $tpid
    echo "mode=$mode $line"
    sed "s/^/  mode=$mode in_flight=$n /" "${TMPDIR:-/tmp}/whole-box-threads.txt" | head -8
  done
  kill $pid; wait $pid 2>/dev/null
done
