#!/bin/bash
# CATALOG=DIR interleaved.sh MODEL SECONDS FLIGHT CYCLES: every arm's server started once, side by
# side on its own port; then CYCLES times, each arm's load window in turn (a window: 2 s of warm-up,
# then SECONDS measured), so that arms are compared within a cycle of a few tens of seconds on a
# shared machine (docs/benchmarks/frontends.md). An idle server costs nothing measurable.
set -u
MODEL=$1; SECS=$2; FLIGHT=$3; CYCLES=$4
HERE=$(cd "$(dirname "$0")" && pwd); TREE=$(cd "$HERE/../../.." && pwd)
PY=$TREE/.venv/bin/python; SIFT=$TREE/.venv/bin/sift
export HF_HUB_OFFLINE=1 SIFT_CATALOG="[\"$CATALOG\"]" SIFT_DEFAULT_MODEL=$MODEL SIFT_BACKEND=onnx:fp32 SIFT_LOG_LEVEL=warning
export PYTHONPATH=$TREE/bench/src
NAMES=("single        pinned cpu0" "single        whole box  " "--frontends 1 whole box  " "--frontends 2 whole box  " "--frontends 1 pinned cpu0")
SCPU=(0 0,1 0,1 0,1 0); CCPU=(1 0,1 0,1 0,1 1); ARGS=("" "" "--frontends 1" "--frontends 2" "--frontends 1")
PIDS=()
for i in "${!NAMES[@]}"; do
  SIFT_PORT=$((18450 + i)) taskset -c ${SCPU[$i]} $SIFT serve ${ARGS[$i]} > /tmp/frontends-arm$i.log 2>&1 & PIDS+=($!)
done
trap 'kill ${PIDS[*]} 2>/dev/null; wait' EXIT
for i in "${!NAMES[@]}"; do
  for t in $(seq 180); do curl -sf localhost:$((18450 + i))/readyz >/dev/null && break; sleep 1; done
done
sleep 5
for c in $(seq $CYCLES); do
  echo "cycle $c $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  for i in "${!NAMES[@]}"; do
    echo -n "${NAMES[$i]}: "
    taskset -c ${CCPU[$i]} $PY $HERE/load.py http://127.0.0.1:$((18450 + i)) $MODEL $FLIGHT $SECS ${PIDS[$i]}
  done
done
