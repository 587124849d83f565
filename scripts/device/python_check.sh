#!/usr/bin/env bash
# One device call for the Python package (issue 16): build the CUDA preset's `peregrine` and the extension for the
# image's python3 (3.12, pybind11 from its pip packages), run the pytest suite there, then the overhead benchmark
# (LLM.generate of 1,000 short prompts against `bench throughput`) on the GPU.
# Here: scripts/device/prepare.sh; there: source .device/carry/env.sh && scripts/device/python_check.sh
set -uo pipefail
out=${OUT:-/tmp/python_check}
mkdir -p "$out"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
py=$(command -v python3)
"$py" --version
b=build/cuda
cmake --preset cuda -DPEREGRINE_PYTHON=ON -DPEREGRINE_PYTHON_EXECUTABLE="$py" \
  -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" -DPEREGRINE_BUILD_TESTS=OFF -DPEREGRINE_BUILD_BENCH=OFF \
  >"$out/build.log" 2>&1 &&
  cmake --build "$b" -j"$(nproc)" --target peregrine peregrine_python >>"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED|Error" "$out/build.log" | head -20; echo "BUILD FAILED"; exit 1; }
ln -sfn cuda build/current
echo "build: $(( $(date +%s) - start )) s"
export PEREGRINE_PYTHON_DIR="$PWD/$b/python" PEREGRINE_BIN="$PWD/$b/peregrine" PYTHONUNBUFFERED=1
timeout 300 "$py" -m pytest -q -p no:cacheprovider tests/python >"$out/pytest.log" 2>&1
echo "pytest rc=$?"; tail -5 "$out/pytest.log"
echo "tests: $(( $(date +%s) - start )) s"
timeout 240 "$py" bench/python_overhead.py --device cuda --repeats 5 2>&1 | tee "$out/overhead_cuda.txt"
echo "total: $(( $(date +%s) - start )) s"
