#!/usr/bin/env bash
# The wgmma prefill attention (issue 14): op tests (every attention case, the 8-bit caches' too), compute-sanitizer
# over the prefill cases, the 8K causal kernel against the mma.sync one (PEREGRINE_PREFILL_WGMMA=0) in the same run,
# then the 8B shape end to end: prefill 8K, the prefix-cache device / host-tier hits (issue 13), offline c 256.
# Here: scripts/device/prefill_wgmma_bundle.sh and scripts/device/carry_light.sh on (off right after); carry .device/carry_kv.
# There: source .device/carry_kv/env.sh && scripts/device/prefill_wgmma.sh
# PERF=0 stops after the tests; TP=0 skips the offline run; PC=0 the prefix-cache runs; PROFILE=1 adds ncu (one 8K
# launch per entry of PROFILE_ENVS, stall reasons) and the kernel's SASS opcode counts (scripts/device/prefill_profile.sh
# gives per-instruction stall samples); VARIANTS (VAR=value entries) runs the attention tests and the kernel bench once
# per entry (VOPS: the tests' filter, CudaAttention.* unless set).
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
ln -sfn "$PWD/models/pycoder-tiny" .device/shared/models/pycoder-tiny
export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaAttention.*:CudaKvQuant.*}" >/tmp/ops.log 2>&1
t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|elements out|max abs" /tmp/ops.log | head -20
if [ "${SAN:-1}" = 1 ]; then
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaAttention.MixedBatchBf16Gqa4:CudaAttention.SlidingWindow:CudaAttention.GqaRatiosAndHeadDims' \
    >/tmp/san.log 2>&1
  t "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -5
fi
# The wgmma shapes in the bf16 head-dim-128 kernel's SASS (an HGMMA.64x8x16 on RZ is ptxas's empty commit: one more
# group for the waits to count, which the kernel must not have)
cuobjdump -sass "$bin/cuda_ops_bench" 2>/dev/null |
  awk '/Function :/ {on = ($0 ~ /prefill_wgmma_kernelI13__nv_bfloat16Li128ELNS0_4attn7KvQuantE0/)} on' |
  grep -oE "HGMMA\.[0-9x]+" | sort | uniq -c | tr '\n' ' '; echo
[ "${PERF:-1}" = 1 ] || exit 0
if [ "${PROFILE:-0}" = 1 ]; then  # one 8K causal bf16 launch of the wgmma kernel under ncu, per variant
  for pv in ${PROFILE_ENVS:-X=1}; do
    env $pv timeout 100 ncu --clock-control none -k regex:prefill_ --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section Occupancy --metrics \
      sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
      "$bin/cuda_ops_bench" --kv-cache-only >/tmp/ncu.txt 2>&1
    t "ncu $pv rc=$?"
    grep -E "Duration|Compute \(SM\) Throughput|Issue Slots|Eligible Warps|Warp Cycles Per Issued|inst_executed|pipe_xu" /tmp/ncu.txt |
      grep -vE "^==PROF==" | sed 's/  */ /g' | head -12
    grep -E "issue_stalled" /tmp/ncu.txt | sed 's/  */ /g' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
      awk '{print $1, $NF}' | sort -k2 -rn | head -8 | tr '\n' ';'; echo
  done
  cuobjdump -sass "$bin/cuda_ops_bench" 2>/dev/null |
    awk '/Function :/ {on = ($0 ~ /prefill_wgmma_kernelI13__nv_bfloat16Li128EE/)} on' |
    grep -oE "^ +/\*[0-9a-f]+\*/ +[A-Z0-9_.]+" | awk '{print $2}' | sed 's/\..*//' |
    sort | uniq -c | sort -rn | head -25 | tr '\n' ' '; echo
fi
if [ -n "${VARIANTS:-}" ]; then
  for v in $VARIANTS; do
    env $v timeout 240 "$bin/cuda_ops_tests" --gtest_filter="${VOPS:-CudaAttention.*}" >/tmp/ops_v.log 2>&1
    t "$v: attention tests rc=$? $(grep -cE '^\[       OK' /tmp/ops_v.log) ok, $(grep -cE '^\[  FAILED' /tmp/ops_v.log) failed"
    env $v timeout 150 "$bin/cuda_ops_bench" --kv-cache-only >/tmp/kv_v.txt 2>&1
    t "kv bench $v:"; grep -E "^\| prefill attention" /tmp/kv_v.txt
  done
fi
timeout 150 "$bin/cuda_ops_bench" --kv-cache-only >/tmp/kv_wg.txt 2>&1
t "kv bench (wgmma prefill) rc=$?"
PEREGRINE_PREFILL_WGMMA=0 timeout 150 "$bin/cuda_ops_bench" --kv-cache-only >/tmp/kv_fa2.txt 2>&1
t "kv bench (mma.sync prefill) rc=$?"
pp wg 8190
pp fa2 8190 PEREGRINE_PREFILL_WGMMA=0
for v in $([ "${PC:-1}" = 1 ] && echo 1 0); do
  PEREGRINE_PREFILL_WGMMA=$v timeout 120 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny \
    --random-weights --config "$cfg" --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 \
    --kv-offloading-size 16 --kv-cache-memory-bytes 4294967296 >"/tmp/pc_$v.txt" 2>&1
  t "prefix-cache wgmma=$v rc=$?"; grep -E '^(prompt|TTFT|ratio|host) ' "/tmp/pc_$v.txt"
done
if [ "${TP:-1}" = 1 ]; then
  timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency "${CONC:-256}" >/tmp/tp.txt 2>&1
  t "throughput rc=$?"; grep -vE "^\[|^$" /tmp/tp.txt | tail -6
fi
echo "== prefill attention, wgmma vs mma.sync (same run)"
grep -E "prefill" /tmp/kv_wg.txt | grep -E "^\| "; grep -E "prefill" /tmp/kv_fa2.txt | grep -E "^\| "
echo "== prefill 8K end to end: wgmma $(field /tmp/pp_wg.txt prefill) tok/s, mma.sync $(field /tmp/pp_fa2.txt prefill) tok/s"
