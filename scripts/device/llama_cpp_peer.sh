#!/usr/bin/env bash
# Peregrine beside llama.cpp's CUDA build on the same GGUF files, on the H200 in one call (bundle from
# scripts/device/peer_bundle.sh; llama.cpp built here by scripts/device/llama_cpp_build.sh):
#   tar -xJf .device/carry_p/bundle.tar.xz -C .device && source .device/carry_p/env.sh && scripts/device/llama_cpp_peer.sh
# Random 8B-shape GGUFs made in /tmp (Q8_0, Q4_0, Q4_K, the Q4_K_M / Q5_K_M mixes of bench/gguf_mix_q4_k_m.py).
# Per file: llama-bench (-ngl 99 -fa 1, pp512 and tg128, 3 repetitions) and llama-batched-bench (512-token prompts,
# 64 new tokens, B = 1 and 32: S_TG), then Peregrine's `bench latency` at the same shapes (512 in, 64 out).
# TYPES narrows the files; BATCH (default 32) the batched size; PEER=0 runs Peregrine alone (no llama.cpp binaries
# needed: any bundle with peregrine and tools/make_random_gguf.py); AB_ENV (space-separated ENV=V,ENV=V sets) adds
# Peregrine's batch 1 under each. Without llama-bench in the bundle (LLAMA_BENCH=0), the tg128 / pp512 columns are
# llama-batched-bench's B = 1 S_TG / S_PP.
set -uo pipefail
out=${OUT:-/tmp/llama_cpp_peer}
mkdir -p "$out"
bin=.device/bin
start=$(date +%s)
B=${BATCH:-32}
nvidia-smi --query-gpu=name,memory.used,clocks.max.sm --format=csv,noheader
echo "llama.cpp commit $(cat .device/llama.cpp.commit 2>/dev/null)"
source "$(dirname "$0")/make_8b_ggufs.sh"
make_8b_ggufs "$out/make.log" ${TYPES:-q8_0 q4_0 q4_k q4_k_m q5_k_m}
echo "made at $(( $(date +%s) - start )) s: $(cd /tmp && ls -s 8b-*.gguf | tr '\n' ' ')"
rows=()
for f in ${TYPES:-q8_0 q4_0 q4_k q4_k_m q5_k_m}; do
  m=/tmp/8b-$f.gguf
  [ -f "$m" ] || { echo "no $m"; continue; }
  lc_tg="" lc_pp="" lc_b="" lc_1=""
  if [ "${PEER:-1}" = 1 ] && [ -x "$bin/llama-bench" ]; then
    timeout 180 "$bin/llama-bench" -m "$m" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o md >"$out/lb_$f.md" 2>"$out/lb_$f.err"
    echo "llama-bench $f rc=$?"; grep -E "tg128|pp512" "$out/lb_$f.md"
    lc_tg=$(grep tg128 "$out/lb_$f.md" | awk -F'|' '{print $(NF-1)}' | awk '{print $1}')
    lc_pp=$(grep pp512 "$out/lb_$f.md" | awk -F'|' '{print $(NF-1)}' | awk '{print $1}')
  fi
  if [ "${PEER:-1}" = 1 ]; then
    timeout 180 "$bin/llama-batched-bench" -m "$m" -ngl 99 -fa on -c $(( (512 + 64) * B + 256 )) -b 2048 -ub 512 \
      -npp 512 -ntg 64 -npl "1,$B" >"$out/bb_$f.txt" 2>"$out/bb_$f.err"
    echo "llama-batched-bench $f rc=$?"; grep -E "^\|" "$out/bb_$f.txt" | tail -3
    # columns: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    lc_b=$(grep -E "^\|" "$out/bb_$f.txt" | awk -F'|' -v b="$B" '$4+0 == b {print $9+0}' | tail -1)
    lc_1=$(grep -E "^\|" "$out/bb_$f.txt" | awk -F'|' '$4+0 == 1 {print $9+0}' | tail -1)
    # without llama-bench: batch 1 (S_TG) and the prompt rate (S_PP) of llama-batched-bench's B = 1 row
    [ -n "$lc_tg" ] || lc_tg=$lc_1
    [ -n "$lc_pp" ] || lc_pp=$(grep -E "^\|" "$out/bb_$f.txt" | awk -F'|' '$4+0 == 1 {print $7+0}' | tail -1)
  fi
  # AB_ENV (space-separated sets ENV=V,ENV=V): Peregrine's batch 1 again under each set of switches, beside the
  # default.
  n=0
  for e in ${AB_ENV:-}; do
    n=$((n + 1))
    env ${e//,/ } timeout 120 "$bin/peregrine" bench latency --model "$m" --device cuda --input-len 512 \
      --output-len 64 --batch-size 1 --iterations 3 >"$out/pg_${f}_ab$n.txt" 2>&1
    echo "peregrine $f bs 1 under $e rc=$? $(grep -E '^decode' "$out/pg_${f}_ab$n.txt")"
  done
  pg=()
  for bs in 1 "$B"; do
    timeout 120 "$bin/peregrine" bench latency --model "$m" --device cuda --input-len 512 --output-len 64 \
      --batch-size "$bs" --iterations 3 >"$out/pg_${f}_bs$bs.txt" 2>&1
    echo "peregrine $f bs $bs rc=$?"; grep -E "^(prefill|decode)" "$out/pg_${f}_bs$bs.txt"
    pg+=("$(grep -E '^decode' "$out/pg_${f}_bs$bs.txt" | awk '{print $2}')")
  done
  pgpp=$(grep -E '^prefill' "$out/pg_${f}_bs1.txt" | grep -oE '[0-9.]+ tokens/s' | awk '{print $1}')
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-" }'; }
  rows+=("| $f | ${pg[0]:-?} | ${lc_tg:-?} | $(ratio "${pg[0]:-0}" "${lc_tg:-0}") | ${lc_1:-?} | ${pg[1]:-?} | ${lc_b:-?} | $(ratio "${pg[1]:-0}" "${lc_b:-0}") | ${pgpp:-?} | ${lc_pp:-?} |")
done
echo
echo "| file | Peregrine bs1 tok/s | llama-bench tg128 | ratio | llama-batched B=1 S_TG | Peregrine bs$B | llama-batched B=$B S_TG | ratio | Peregrine prefill 512 | llama-bench pp512 |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo "total: $(( $(date +%s) - start )) s"
