#!/bin/bash
# Round 6 (issue 36): the floor and Sift trees in one run, all servers started at once on CPU 0
# (an idle server costs nothing), measured in turn with the closed-loop client on CPU 1, so every
# arm sees the same minutes of the shared machine.
# Usage: CATALOG=DIR MODEL=tiny/embedder round6_ab.sh ROUNDS SECONDS TREE...
#        (a TREE named "floor" is `sift bench floor` from this checkout; LOADS="8 32" by default;
#         BACKEND=onnx:fp32 by default, for every arm)
set -u
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../.." && pwd)
PY=$ROOT/.venv/bin/python
ROUNDS=$1 SECS=$2; shift 2
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false SIFT_BACKEND=${BACKEND:-onnx:fp32}
CAT=(); [ -n "${CATALOG:-}" ] && CAT=(--catalog "$CATALOG")
FLOORCAT=${CATALOG:-$ROOT/server/src/sift_server/catalog}
PIDS=() PORTS=() NAMES=()
k=0
for tree in "$@"; do
  port=$((18781 + k))
  if [ "$tree" = floor ]; then
    (PYTHONPATH=$ROOT/server/src:$ROOT/bench/src:$ROOT/sdk/src exec taskset -c 0 "$PY" -m sift_server bench floor \
      --catalog "$FLOORCAT" --model "$MODEL" --port $port > /tmp/round6-$k.log 2>&1) &
  else
    (cd "$tree" && PYTHONPATH=$tree/server/src exec taskset -c 0 "$PY" -m sift_server serve \
      "${CAT[@]}" --model "$MODEL" --port $port --torch-threads 1 --log-level warning > /tmp/round6-$k.log 2>&1) &
  fi
  PIDS+=($!) PORTS+=($port) NAMES+=("$(basename "$tree")")
  k=$((k + 1))
done
for port in "${PORTS[@]}"; do
  for i in $(seq 1 1200); do curl -sf localhost:$port/readyz >/dev/null && break; sleep 0.1; done
done
sleep "${SETTLE_S:-10}"
for k in "${!PORTS[@]}"; do  # warm each server
  taskset -c 1 "$PY" "$HERE/../frontends/load.py" http://127.0.0.1:${PORTS[$k]} "$MODEL" 8 1 ${PIDS[$k]} > /dev/null
done
forwards() {  # "count sum" of sie_gpu_batch_items (Sift's arms; the floor has no /metrics)
  curl -s localhost:$1/metrics | awk '/^sie_gpu_batch_items_count/{c=$2} /^sie_gpu_batch_items_sum/{s=$2} END{print c+0, s+0}'
}
for round in $(seq 1 "$ROUNDS"); do
  echo "round=$round $(date -u +%T) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
  for n in ${LOADS:-8 32}; do
    for k in "${!PORTS[@]}"; do
      read c0 s0 < <(forwards ${PORTS[$k]})
      line=$(taskset -c 1 "$PY" "$HERE/../frontends/load.py" http://127.0.0.1:${PORTS[$k]} "$MODEL" $n "$SECS" ${PIDS[$k]})
      read c1 s1 < <(forwards ${PORTS[$k]})
      echo "round=$round arm=${NAMES[$k]} $line items_per_forward=$(awk -v a=$c0 -v b=$c1 -v x=$s0 -v y=$s1 'BEGIN{if (b>a) printf "%.1f", (y-x)/(b-a); else print "-"}')"
    done
  done
done
for pid in "${PIDS[@]}"; do kill $pid; wait $pid 2>/dev/null; done
