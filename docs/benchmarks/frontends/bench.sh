#!/bin/bash
# CATALOG=DIR bench.sh MODEL SECONDS FLIGHT ROUNDS: the arms interleaved in one run
# (docs/benchmarks/frontends.md); CATALOG holds the tiny/embedder entry (tests/fixtures).
# ARMS (optional): which arms, by number (default "1 2 3 4").
set -u
MODEL=$1; SECS=$2; FLIGHT=$3; ROUNDS=$4; ARMS=${ARMS:-1 2 3 4}
HERE=$(cd "$(dirname "$0")" && pwd); TREE=$(cd "$HERE/../../.." && pwd)
PY=$TREE/.venv/bin/python; SIFT=$TREE/.venv/bin/sift
export HF_HUB_OFFLINE=1 SIFT_CATALOG="[\"$CATALOG\"]" SIFT_DEFAULT_MODEL=$MODEL SIFT_BACKEND=onnx:fp32 SIFT_LOG_LEVEL=warning SIFT_PORT=18440
export PYTHONPATH=$TREE/bench/src
arm() { # name server_cpus client_cpus command...
  local name=$1 scpu=$2 ccpu=$3; shift 3
  taskset -c $scpu "$@" > /tmp/frontends-arm.log 2>&1 & local pid=$!
  for i in $(seq 120); do curl -sf localhost:18440/readyz >/dev/null && break; sleep 1; done
  sleep 5
  echo -n "$name: "; taskset -c $ccpu $PY $HERE/load.py http://127.0.0.1:18440 $MODEL $FLIGHT $SECS $pid
  kill $pid; wait $pid 2>/dev/null; sleep 1
}
for r in $(seq $ROUNDS); do
  echo "round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  for a in $ARMS; do
    case $a in
      1) arm "single  pinned cpu0      " 0 1 $SIFT serve ;;
      2) arm "single  whole box        " 0,1 0,1 $SIFT serve ;;
      3) arm "--frontends 1 whole box  " 0,1 0,1 $SIFT serve --frontends 1 ;;
      4) arm "--frontends 2 whole box  " 0,1 0,1 $SIFT serve --frontends 2 ;;
      5) arm "--frontends 1 pinned cpu0" 0 1 $SIFT serve --frontends 1 ;;
    esac
  done
done
