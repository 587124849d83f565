#!/usr/bin/env bash
# Prepares .device/ (git-ignored) for a GPU call: what the device image lacks, and the fixtures a run needs.
#   .device/deps    Debian's PCRE2, ICU 72 and xxhash headers and libraries, unpacked (the image has none of them)
#   .device/shared  the parts of ../shared the GPU checks read (references, draft and architecture models, configs)
#   .device/env.sh  sourced on the device: points pkg-config, the compiler and the loader at .device/deps
#   .device/bin     with --binaries: this machine's build of the CUDA preset (peregrine, test binaries), so the device
#                   need not build; and --old PATH adds a baseline binary as bin/peregrine-old.
# Usage (here, at the repository root): scripts/device/prepare.sh [--binaries] [--old PATH]
# Then: run(command="source .device/carry/env.sh && scripts/device/<check>.sh", carry=[".device/carry"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
binaries=0
old=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binaries) binaries=1; shift ;;
    --old) old="$2"; shift 2 ;;
    *) echo "prepare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
dev=.device
mkdir -p "$dev/deps" "$dev/debs"
if [ ! -f "$dev/deps/.done" ]; then
  (cd "$dev/debs" && apt-get download -q libpcre2-dev libpcre2-8-0 libxxhash-dev libxxhash0 libicu-dev libicu72 \
     2>/dev/null >/dev/null)
  for d in "$dev"/debs/*.deb; do dpkg -x "$d" "$dev/deps"; done
  # Only what building and running Peregrine needs: pcre2-8, icu-uc (+ its data), xxhash; headers and .pc files.
  lib="$dev/deps/usr/lib/x86_64-linux-gnu"
  find "$dev/deps" -name '*.a' -delete
  rm -rf "$lib"/libicui18n* "$lib"/libicuio* "$lib"/libicutest* "$lib"/libicutu* "$lib"/libpcre2-16* "$lib"/libpcre2-32* \
         "$lib"/libpcre2-posix* "$lib/icu" "$dev/deps/usr/bin" "$dev/deps/usr/sbin" "$dev/deps/usr/share/doc" \
         "$dev/deps/usr/share/man" "$dev/debs"
  touch "$dev/deps/.done"
fi
cat >"$dev/env.sh" <<'ENV'
# Sourced on the device from the repository root. The bundle travels compressed (the call's 64 MiB limit).
# Unpacked once per bundle (a warm machine keeps .device/ between calls, perhaps from another bundle).
if [ -f .device/carry/bundle.tar.xz ]; then
  stamp=.device/.unpacked_$(stat -c %s .device/carry/bundle.tar.xz)
  [ -f "$stamp" ] || { tar -xJf .device/carry/bundle.tar.xz -C .device && touch "$stamp"; }
fi
export PEREGRINE_DEPS="$PWD/.device/deps"
export PKG_CONFIG_SYSROOT_DIR="$PEREGRINE_DEPS"
export PKG_CONFIG_PATH="$PEREGRINE_DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$PEREGRINE_DEPS/usr/share/pkgconfig"
export CPATH="$PEREGRINE_DEPS/usr/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$PEREGRINE_DEPS/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$PEREGRINE_DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
mkdir -p .device/shared/models && ln -sfn "$PWD/models/pycoder-tiny" .device/shared/models/pycoder-tiny
mkdir -p .device/shared/data && ln -sfn "$PWD/.device/shared/code-dev.json" .device/shared/data/code-dev.json
ENV
shared=../shared
mkdir -p "$dev/shared/models/arch" "$dev/shared/configs"
# The fixtures the CUDA cases read (pycoder-tiny travels with the tree; SHARED_EXTRA adds more, e.g. pycoder-draft).
for m in qwen3-qknorm mistral-swa llama-yarn; do cp -r "$shared/models/arch/$m" "$dev/shared/models/arch/"; done
for extra in ${SHARED_EXTRA:-}; do cp -r "$shared/$extra" "$dev/shared/$(dirname "$extra")/"; done
cp "$shared"/models/*.reference.json "$dev/shared/models/"
cp "$shared"/configs/*.json "$dev/shared/configs/"
cp "$shared/data/code-dev.json" "$dev/shared/"
if [ "$binaries" -eq 1 ]; then
  b=build/cuda
  [ -x "$b/peregrine" ] || { echo "prepare.sh: no CUDA build at $b (cmake --preset cuda && cmake --build --preset cuda)" >&2; exit 1; }
  rm -rf "$dev/bin" && mkdir -p "$dev/bin"
  # BINARIES picks a subset (names below) when the call's 64 MiB would not hold them all.
  for f in ${BINARIES:-peregrine model_tests engine_model_tests cuda_ops_tests cuda_ops_bench verify_bench}; do
    case "$f" in
      peregrine) cp "$b/peregrine" "$dev/bin/" ;;
      model_tests|engine_model_tests) cp "$b/tests/unit/$f" "$dev/bin/" ;;
      cuda_ops_tests) cp "$b/tests/cuda/cuda_ops_tests" "$dev/bin/" ;;
      cuda_ops_bench) [ -x "$b/bench/cuda/cuda_ops_bench" ] && cp "$b/bench/cuda/cuda_ops_bench" "$dev/bin/" ;;
      verify_bench) [ -x "$b/bench/verify_bench" ] && cp "$b/bench/verify_bench" "$dev/bin/" ;;
      *) echo "prepare.sh: unknown binary $f" >&2; exit 2 ;;
    esac
  done
  strip "$dev"/bin/* 2>/dev/null || true
fi
if [ -n "$old" ]; then mkdir -p "$dev/bin" && cp "$old" "$dev/bin/peregrine-old" && strip "$dev/bin/peregrine-old" || true; fi
# One compressed bundle travels; the unpacked folders stay here (exclude them from the carry by carrying the bundle).
# The tracked tree is ~46 MiB of the call's 64: keep the bundle under ~17 MiB (BINARIES, and SHARED=configs to
# send only the model configs when no fixture is read).
tar -C "$dev" -cf - deps $( [ "${SHARED:-all}" = configs ] && echo shared/configs || echo shared ) \
  $( [ -d "$dev/bin" ] && echo bin ) | xz -T"$(nproc)" -9e >"$dev/bundle.tar.xz"
mkdir -p "$dev/carry" && mv "$dev/bundle.tar.xz" "$dev/carry/" && cp "$dev/env.sh" "$dev/carry/env.sh"
du -sh "$dev/carry" | awk '{print "prepare.sh: .device/carry holds " $1 " (carry it as .device/carry)"}'
