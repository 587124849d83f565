#!/usr/bin/env bash
# Runs every test that needs no GPU: unit tests (ctest) and end-to-end tests with the real npm clients.
# Tests that read ../shared (reference fixtures) skip with a message where it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/current
[ -d "$build" ] || { echo "test.sh: no build at $build; run scripts/setup.sh first" >&2; exit 2; }
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 600
if [ -d tests/e2e ] && ls tests/e2e/*.test.mjs >/dev/null 2>&1; then
  PEREGRINE_BIN="$PWD/$build/peregrine" node --test --test-concurrency=1 tests/e2e/
fi
