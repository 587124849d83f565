# Sourced by the device scripts: make_8b_ggufs LOG TYPE... makes the random Llama-3-8B-shape GGUFs /tmp/8b-TYPE.gguf
# that are not there yet (TYPE: q8_0, q4_0, f16, bf16 from make_random_gguf.py; q4_k from bench/gguf_q4_0_to_q4_k.py;
# q4_k_m and q5_k_m, llama.cpp's mixes, from bench/gguf_mix_q4_k_m.py; the last three start from the Q4_0 file),
# logging to LOG. MAKE_RANDOM_GGUF overrides where make_random_gguf.py is (default .device/tools/).
make_8b_ggufs() {
  local log=$1 t
  shift
  local gen=${MAKE_RANDOM_GGUF:-.device/tools/make_random_gguf.py}
  for t in "$@"; do
    [ -f "/tmp/8b-$t.gguf" ] && continue
    case "$t" in
      q4_k | q4_k_m | q5_k_m) make_8b_ggufs "$log" q4_0 ;;
    esac
    case "$t" in
      q8_0 | q4_0 | f16 | bf16)
        timeout 240 python3 "$gen" --hidden 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 \
          --ctx 8192 --dtype "$t" --out "/tmp/8b-$t.gguf" >>"$log" 2>&1 ;;
      q4_k) timeout 200 python3 bench/gguf_q4_0_to_q4_k.py /tmp/8b-q4_0.gguf /tmp/8b-q4_k.gguf >>"$log" 2>&1 ;;
      q4_k_m) timeout 200 python3 bench/gguf_mix_q4_k_m.py /tmp/8b-q4_0.gguf /tmp/8b-q4_k_m.gguf >>"$log" 2>&1 ;;
      q5_k_m) timeout 200 python3 bench/gguf_mix_q4_k_m.py /tmp/8b-q4_0.gguf /tmp/8b-q5_k_m.gguf q5_k_m >>"$log" 2>&1 ;;
      *) echo "make_8b_ggufs: unknown type $t" >>"$log" ;;
    esac
  done
}
