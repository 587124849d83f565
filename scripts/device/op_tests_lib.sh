# Sourced by the device-side scripts (decode_small.sh, w4_wgmma.sh): `tests LABEL FILTER [ENV=V ...]` runs the carried
# cuda_ops_tests (.device/bin) on a gtest filter under those switches, logs to /tmp/tests_LABEL.log and prints the
# return code, the verdict and the first failure lines. TEST_TIMEOUT: seconds a run may take (200).
tests() {
  local label=$1 filter=$2; shift 2
  env "$@" timeout "${TEST_TIMEOUT:-200}" .device/bin/cuda_ops_tests --gtest_filter="$filter" >"/tmp/tests_$label.log" 2>&1
  echo "tests $label rc=$?"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure|elements out|Expected|Which is|M [0-9]" "/tmp/tests_$label.log" | head -16
}
