#!/usr/bin/env bash
# Runs every test that needs no GPU: unit tests (ctest), end-to-end tests with the real npm clients, and the Python
# package's tests (pytest, with the interpreter the package was built for: Debian's /usr/bin/python3).
# Tests that read ../shared (reference fixtures) skip with a message where it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/current
[ -d "$build" ] || { echo "test.sh: no build at $build; run scripts/setup.sh first" >&2; exit 2; }
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 600
if [ -d tests/e2e ] && ls tests/e2e/*.test.mjs >/dev/null 2>&1; then
  PEREGRINE_BIN="$PWD/$build/peregrine" node --test --test-concurrency=2 tests/e2e/
fi
if [ -f "$build/python/peregrine/__init__.py" ]; then
  python=$(sed -n 's/^PEREGRINE_PYTHON_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  PEREGRINE_PYTHON_DIR="$PWD/$build/python" PEREGRINE_BIN="$PWD/$build/peregrine" \
    "${python:-/usr/bin/python3}" -m pytest -q -p no:cacheprovider tests/python
else
  echo "test.sh: $build has no Python package (pybind11 missing, or a sanitizer build); Python tests skipped"
fi
