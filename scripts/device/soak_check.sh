#!/usr/bin/env bash
# One device call for issue 14's soak on CUDA: scripts/stress/soak.py's 10,000-request mix against `peregrine serve`
# on the GPU (pycoder-tiny), device memory (peregrine:device_memory_used_bytes) and RSS sampled every 250 requests;
# then the same mix with the prefix cache's host tier on (copies down and up under load). About 3-5 minutes.
# Here: BINARIES=peregrine SHARED=configs scripts/device/prepare.sh --binaries (the server needs pycoder-tiny, which
# travels with the tree: no carry_light.sh); there: source .device/carry/env.sh && scripts/device/soak_check.sh [N]
set -uo pipefail
out=${OUT:-/tmp/soak}
mkdir -p "$out"
n=${1:-10000}
lim=${SOAK_TIMEOUT:-280}  # seconds per run
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bin=.device/bin/peregrine
"$bin" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout "$lim" python3 scripts/stress/soak.py --bin "$bin" --device cuda --requests "$n" --concurrency 64 \
  --json-out "$out/soak_cuda.json" >"$out/soak_cuda.txt" 2>&1
echo "soak cuda rc=$?"
timeout "$lim" python3 scripts/stress/soak.py --bin "$bin" --device cuda --requests "$n" --concurrency 64 \
  --server-args "--kv-offloading-size 1 --num-gpu-blocks-override 512" \
  --json-out "$out/soak_cuda_tiers.json" >"$out/soak_cuda_tiers.txt" 2>&1
echo "soak cuda + host tier rc=$?"
python3 - "$out" <<'PY'
import json, sys
print(f"{'run':<16}{'requests':>9}{'fail':>6}{'s':>7}{'rss warm MB':>13}{'rss growth MB':>15}{'dev warm MB':>13}{'dev growth MB':>15}{'exit':>6}")
for name in ("soak_cuda", "soak_cuda_tiers"):
    try:
        d = json.load(open(f"{sys.argv[1]}/{name}.json"))
    except OSError:
        print(f"{name:<16} (no result)"); continue
    mb = lambda b: "-" if b is None else f"{b / 1048576:.1f}"
    r, g = d["rss_bytes"], d["device_used_bytes"]
    print(f"{name:<16}{d['requests']:>9}{d['failures']:>6}{d['seconds']:>7.0f}{mb(r['warm']):>13}{mb(r['growth_after_warmup']):>15}"
          f"{mb(g['warm']):>13}{mb(g['growth_after_warmup']):>15}{str(d['exit_code']):>6}")
PY
