#!/usr/bin/env bash
# The device tool carries the tracked tree (48.5 MB, 43 MB of it models/pycoder-tiny/model.safetensors) beside the
# carried bundles, within 64 MiB a call. For calls that do not need the model:
#   scripts/device/carry_light.sh on    take the weights out of the index (and ignore them) before the call
#   scripts/device/carry_light.sh off   put them back right after (always: a commit in between would delete them)
set -euo pipefail
cd "$(dirname "$0")/../.."
f=models/pycoder-tiny/model.safetensors
case "${1:?on|off}" in
  on)
    git rm -q --cached "$f"
    grep -qxF "$f" .git/info/exclude || echo "$f" >>.git/info/exclude
    ;;
  off)
    sed -i "\#^$f\$#d" .git/info/exclude
    git reset -q "$f"
    ;;
  *) echo "carry_light.sh: on or off" >&2; exit 2 ;;
esac
git status --short "$f"
