#!/usr/bin/env bash
# One device call for speculation under load: `bench speculative` on pycoder-tiny with every method at concurrency
# 1, 8 and 32, on two pinned CPU cores of the device host (two runs side by side, one per workload, on cores far
# apart; each has its own plain baseline) and on the H200 (pycoder-tiny, same methods), medians of --repeats.
# Here: scripts/device/prepare.sh --binaries (pycoder-draft does not fit the call's 64 MiB beside the tree; with
# SHARED_EXTRA=models/pycoder-draft and DRAFT=1 there, where it fits, draft_model runs too)
# There: source .device/carry/env.sh && scripts/device/spec_load.sh
set -uo pipefail
out=${OUT:-/tmp/spec_load}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
data=.device/shared/code-dev.json
draft=.device/shared/models/pycoder-draft
lscpu | grep -E "^Model name|^L3|^NUMA node\(s\)|^CPU\(s\)"
methods=(--speculative-config '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}'
         --speculative-config '{"method": "lookahead", "num_speculative_tokens": 6}'
         --speculative-config '{"method": "lookahead", "num_speculative_tokens": 5, "num_branches": 3, "max_tree_tokens": 12}'
         ${DRAFT:+--speculative-config "{\"method\": \"draft_model\", \"num_speculative_tokens\": 4, \"model\": \"$draft\"}"}
         --speculative-config '{"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3}')
cpu_run() {  # workload cores
  timeout 400 taskset -c "$2" "$bin/peregrine" bench speculative --model models/pycoder-tiny --dataset "$data" \
    --device cpu --threads 2 --workloads "$1" --concurrency 1,8,32 --output-len 128 --repeats "${REPEATS:-3}" \
    "${methods[@]}" --json-out "$out/cpu_$1.json" >"$out/cpu_$1.txt" 2>&1
  echo "cpu $1 rc=$?"
}
cpu_run complete 0,1 &
cpu_run edit 8,9 &
wait
timeout 150 "$bin/peregrine" bench speculative --model models/pycoder-tiny --dataset "$data" --device cuda \
  --concurrency 1,8,32 --output-len 128 --repeats 3 "${methods[@]}" \
  --json-out "$out/cuda.json" >"$out/cuda.txt" 2>&1; echo "cuda rc=$?"
echo "total: $(( $(date +%s) - start )) s"
echo "== CPU (2 pinned cores each), complete"; cat "$out/cpu_complete.txt"
echo "== CPU (2 pinned cores each), edit"; cat "$out/cpu_edit.txt"
echo "== H200"; cat "$out/cuda.txt"
