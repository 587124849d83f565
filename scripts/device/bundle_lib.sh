# Sourced by the scripts/device/*_bundles.sh scripts: moves to the repository root, makes .device/deps and
# .device/env.sh (prepare.sh), sets b (the CUDA build, BUILD to override) and stage (a scratch folder removed on
# exit), and defines pack.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -f .device/deps/.done ] && [ -f .device/env.sh ] || scripts/device/prepare.sh >/dev/null
b=${BUILD:-build/cuda}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# pack DIR PATH...: DIR/bundle.tar.xz of the PATHs under $stage (xz -9e, or XZ_LEVEL) and DIR/env.sh, which
# unpacks that bundle; prints the size.
pack() {
  local dir=$1; shift
  rm -rf "$dir" && mkdir -p "$dir"
  tar -C "$stage" -cf - "$@" | xz -T"$(nproc)" "-${XZ_LEVEL:-9e}" >"$dir/bundle.tar.xz"
  sed "s#\.device/carry/bundle#$dir/bundle#g" .device/env.sh >"$dir/env.sh"
  echo "$dir: $(du -sh "$dir" | cut -f1) ($(stat -c %s "$dir/bundle.tar.xz") bytes)"
}
