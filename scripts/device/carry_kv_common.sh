# Sourced on the device by the scripts that run from the .device/carry_kv bundle (scripts/device/kv_attn.sh bundle):
# t (a line with the seconds since the start), $bin, $cfg (the 8B shape), and pycoder-tiny's weights back in place
# (the call carried them in the bundle, the tree without them: carry_light.sh on).
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
[ -f models/pycoder-tiny/model.safetensors ] || cp .device/model/model.safetensors models/pycoder-tiny/
