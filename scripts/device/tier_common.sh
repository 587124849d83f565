# Sourced by the prefix-cache tier scripts run on the device (tier_h200.sh, tier_ttft.sh) with NAME set: $out (the
# output folder, $OUT there), $bin, $cfg (the 8B shape), $tok (the tokenizer's model folder) and t (a line with the
# seconds since the start).
out=${OUT:-/tmp/$NAME}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
tok=models/pycoder-tiny
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
