#!/bin/bash
# Instructions per request of Sift's request work (round 6): the in-process stub run
# (inprocess_cost.py, STUB=1, 32 in flight) under callgrind, twice per tree (N1 and N2 measured
# requests after the same start and warm-up); (Ir(N2) - Ir(N1)) / (N2 - N1) is the count per request.
# Usage: CAT=DIR callgrind_cost.sh TREE N OUT   (prints callgrind's "Collected" line)
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../.." && pwd)
PYTHONPATH=$1/server/src STUB=1 HF_HUB_OFFLINE=1 SIFT_BACKEND=onnx:fp32 SIFT_LOG_LEVEL=warning PYTHONHASHSEED=0 \
  taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$3" "$ROOT/.venv/bin/python" \
  "$HERE/inprocess_cost.py" 32 "$2" 1 > "$3.log" 2>&1
grep -o "Collected : [0-9]*" "$3.log"
