#!/usr/bin/env bash
# One device call (bundle: scripts/device/lowp_bundle.sh): W4A16 / W8A16 on int8 activations on the host's AVX-512
# VNNI kernels (CpuQuantLowp, CpuGgml, CpuQuantMatmul), and the quantized fixtures on every backend there (CPU exact
# and int8-activation paths on VNNI, CUDA f32 and bf16 with the W4A16 tensor-core GEMM).
# There: source .device/carry_lowp/env.sh && scripts/device/lowp_check.sh
set -uo pipefail
out=${OUT:-/tmp/lowp_check}
mkdir -p "$out"
bin=.device/bin
export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
grep -m1 "model name" /proc/cpuinfo; grep -o -m1 "avx512_vnni" /proc/cpuinfo
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 "$bin/backend_cpu_tests" --gtest_filter='*CpuQuantLowp*:*CpuGgml*:*CpuQuantMatmul*' >"$out/cpu.log" 2>&1
echo "backend_cpu_tests rc=$?"; grep -E "packed as|packed layout|^\[  (PASSED|FAILED)|Failure" "$out/cpu.log" | head -20
timeout 300 "$bin/model_tests" --gtest_filter='Quantized/*' >"$out/model.log" 2>&1
echo "model_tests rc=$?"; grep -E "largest|^\[  (PASSED|FAILED)|Failure" "$out/model.log" | head -60
