# Sourced on the device by the scripts that run from the .device/carry_kv bundle (scripts/device/kv_attn.sh bundle):
# t (a line with the seconds since the start), $bin, $cfg (the 8B shape), and pycoder-tiny's weights back in place
# (the call carried them in the bundle, the tree without them: carry_light.sh on); lat, pp and field below.
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
[ -f models/pycoder-tiny/model.safetensors ] || cp .device/model/model.safetensors models/pycoder-tiny/

# lat NAME [VAR=value...]: `bench latency` of the 8B shape at batch ${BS:-1} (quantization $Q when set) with the
# variables set, its decode line kept in /tmp/lat_NAME.txt.
lat() {
  local name=$1; shift
  env X=1 "$@" timeout 120 "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 64 --batch-size "${BS:-1}" --iterations 2 ${Q:+--quantization $Q} \
    >"/tmp/lat_$name.txt" 2>&1
  t "latency $name rc=$?: $(grep -E '^decode' "/tmp/lat_$name.txt" | head -1)"
}

# field FILE WORD: the tokens/s figure of the `bench latency` line starting with WORD (prefill, decode).
field() { grep -E "^$2" "$1" | grep -oE "[0-9.]+ tokens/s" | grep -oE "[0-9.]+" | head -1; }

# pp NAME LEN [VAR=value...]: `bench latency` prefill of LEN tokens of the 8B shape at batch 1 (quantization $Q when
# set) with the variables set, kept in /tmp/pp_NAME.txt.
pp() {
  local name=$1 len=$2; shift 2
  env X=1 "$@" timeout "${PP_TIMEOUT:-120}" "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights \
    --config "$cfg" --device cuda --input-len "$len" --output-len 2 --batch-size 1 --iterations 2 \
    ${Q:+--quantization $Q} >"/tmp/pp_$name.txt" 2>&1
  t "prefill $len $name rc=$?: $(field "/tmp/pp_$name.txt" prefill) tok/s"
}

# fused_equals_unfused Q PROMPT...: pycoder-tiny quantized at load with Q, greedy JSON with logprobs, with the decode
# fusions and with PEREGRINE_FUSE=0: the two outputs must be byte-identical.
fused_equals_unfused() {
  local q=$1; shift
  local prompts=()
  for p in "$@"; do prompts+=(--prompt "$p"); done
  for fuse in 1 0; do
    PEREGRINE_FUSE=$fuse timeout 60 "$bin/peregrine" generate --model models/pycoder-tiny --device cuda -q "$q" \
      "${prompts[@]}" --max-tokens 48 --ignore-eos --json --logprobs 3 >"/tmp/gen_${q}_$fuse.json" 2>/tmp/gen_err.txt ||
      { echo "generate $q fuse=$fuse failed"; tail -3 /tmp/gen_err.txt; }
  done
  if cmp -s "/tmp/gen_${q}_1.json" "/tmp/gen_${q}_0.json" && [ -s "/tmp/gen_${q}_1.json" ]; then
    t "generate $q: fused == unfused ($(wc -l <"/tmp/gen_${q}_1.json") prompts, logprobs included)"
  else
    t "generate $q: fused and unfused DIFFER"; diff <(head -c 600 "/tmp/gen_${q}_1.json") <(head -c 600 "/tmp/gen_${q}_0.json")
  fi
}
