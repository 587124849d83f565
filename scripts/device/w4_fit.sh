#!/usr/bin/env bash
# W4A16 on the warpgroup kernels (w4_wgmma.cu) against the switches that turn the defaults off:
# PEREGRINE_W4_WG_FIT=0 (w4_gemm's split instead of the fitted one), PEREGRINE_W4_WG_WIDE=0 (64 < M <= 256 on the
# 64-token kernels instead of the wide kernel), PEREGRINE_W4_WG_WIDE_FROM=m (the wide kernel from M m) and
# PEREGRINE_W4_WG_WIDE_FIT=0 (the wide kernel's split without counting the clusters that fit), PEREGRINE_W4_WG_STREAMK=0
# (no stream-K kernel). The W4A16 op tests
# (defaults, each switch, a forced split of SPLITS, the cp.async ring when RING=1), decode beside bf16 (RUNS), the
# per-projection timing (TIMINGS: its switch sets), a memcheck; NCU=1 then profiles one gate/up launch at M 256
# (NCU_ENV: its switches; details.csv / source.csv under $OUT); the kernels' SASS when a cubin of w4_wgmma.cu is
# carried beside the bundle.
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, scripts/device/carry_light.sh on (off right after);
# there: source .device/carry_w4/env.sh && scripts/device/w4_fit.sh
set -uo pipefail
b=.device/bin
source scripts/device/op_tests_lib.sh
rows() { TESTS=0 RUNS="$1" scripts/device/w4_skinny.sh run 2>&1 | grep --line-buffered -E "^\| [a-z]|rc="; }
nvidia-smi --query-gpu=name --format=csv,noheader
F=PEREGRINE_W4_WG_FIT=0
W=PEREGRINE_W4_WG_WIDE=0
W129=PEREGRINE_W4_WG_WIDE_FROM=129
WF=PEREGRINE_W4_WG_WIDE_FIT=0
SK=PEREGRINE_W4_WG_STREAMK=0
TEST_TIMEOUT=60 tests default 'CudaQuantMatmul.W4Gemm*:CudaQuantMatmul.RowsDoNotDependOnMWithinAPath'
if [ "${FULL:-1}" = 1 ]; then  # FULL=0: the defaults' and stream-K's tests only
  TEST_TIMEOUT=60 tests nowide 'CudaQuantMatmul.W4Gemm*:CudaQuantMatmul.RowsDoNotDependOnMWithinAPath' $W
  TEST_TIMEOUT=60 tests wide129 'CudaQuantMatmul.W4Gemm*:CudaQuantMatmul.RowsDoNotDependOnMWithinAPath' $W129
  TEST_TIMEOUT=60 tests widefit0 'CudaQuantMatmul.W4Gemm*' $WF
fi
TEST_TIMEOUT=60 tests streamk0 'CudaQuantMatmul.W4Gemm*:CudaQuantMatmul.RowsDoNotDependOnMWithinAPath' $SK
for s in ${SPLITS:-6}; do TEST_TIMEOUT=60 tests "split$s" 'CudaQuantMatmul.W4Gemm*' PEREGRINE_W4_WG_SPLITS=$s; done
[ "${RING:-0}" = 1 ] && TEST_TIMEOUT=60 tests ring 'CudaQuantMatmul.W4Gemm*' PEREGRINE_W4_WG_TMA=0
if [ -f .device/carry_w4/w4_wgmma.cubin ] && [ -n "${OUT:-}" ]; then
  cuobjdump -sass .device/carry_w4/w4_wgmma.cubin | gzip >"$OUT/w4_wgmma.sass.gz"; echo "sass rc=$?"
fi
rows "${RUNS:-bf16b128:new:bf16:128 w4b128:new:w4a16:128 w4b128sk0:new:w4a16:128:$SK bf16b256:new:bf16:256 \
w4b256:new:w4a16:256 w4b256sk0:new:w4a16:256:$SK}"
for e in ${TIMINGS:-X=1 $SK}; do
  env ${e//,/ } timeout 100 "$b/cuda_ops_tests" --gtest_also_run_disabled_tests --gtest_filter='*W4GemmTiming' \
    >/tmp/timing.log 2>&1
  echo "timing $e rc=$?"; grep -E "^\|" /tmp/timing.log | grep -E "shape|layer|q/o|gate|down"
done
timeout 120 compute-sanitizer --tool memcheck "$b/cuda_ops_tests" --gtest_filter='CudaQuantMatmul.W4Gemm*' \
  >/tmp/san.log 2>&1 </dev/null
echo "sanitizer memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -3
if [ "${NCU:-0}" = 1 ] && [ -n "${OUT:-}" ]; then
  env ${NCU_ENV:-X=1} PEREGRINE_W4_TIMING_M=256 PEREGRINE_W4_TIMING_SHAPE=gate/up timeout 150 ncu --kernel-name regex:'w4_(wide|streamk|wgmma)' \
    --launch-skip 2 --launch-count 1 --set full --import-source yes -f -o "$OUT/prof" "$b/cuda_ops_tests" \
    --gtest_also_run_disabled_tests --gtest_filter='*W4GemmTiming' >/tmp/ncu_run.txt 2>&1
  echo "ncu rc=$?"; tail -2 /tmp/ncu_run.txt
  ncu --import "$OUT/prof.ncu-rep" --page details --csv >"$OUT/details.csv" 2>/dev/null
  ncu --import "$OUT/prof.ncu-rep" --page source --csv --print-source sass >"$OUT/source.csv" 2>/dev/null
  rm -f "$OUT/prof.ncu-rep"
fi
