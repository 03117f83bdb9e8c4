#!/usr/bin/env bash
# Build the AVX2-only emulation into OUT (default /tmp/avx2only) and write OUT/env.sh, which
# makes every process started after `source OUT/env.sh` see a CPU without AVX-512, AVX512-BF16,
# AVX-VNNI or AMX: ONNX Runtime and OpenVINO through patched copies of their libraries
# (avx2only.c, patch_cpuid.py), PyTorch through its own variables.
#   bench/tools/avx2_only/setup.sh [OUT]; source OUT/env.sh; <command>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/tmp/avx2only}
py=${PYTHON:-$here/../../../.venv/bin/python}
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$out"
gcc -O2 -shared -fPIC -Wall -Wextra "$here/avx2only.c" -o "$out/libavx2only.so" -ldl
ort=$(ls "$site"/onnxruntime/capi/onnxruntime_pybind11_state*.so)
ov_core=$(ls "$site"/openvino/libs/libopenvino.so.* | grep -E 'libopenvino\.so\.[0-9]+$')
map=$("$py" "$here/patch_cpuid.py" "$out/libs" "$ort" "$site/openvino/libs/libopenvino_intel_cpu_plugin.so")
core=$("$py" "$here/patch_cpuid.py" "$out/core" "$ov_core")
cat >"$out/env.sh" <<ENV
# AVX2-only emulation (bench/tools/avx2_only). The patched OpenVINO core is preloaded: it is a
# link-time dependency, which dlopen redirection cannot reach.
export AVX2ONLY_MAP="$map"
export LD_PRELOAD="$out/libavx2only.so ${core#*=}"
export ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2
ENV
echo "source $out/env.sh"
