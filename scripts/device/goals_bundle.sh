#!/usr/bin/env bash
# The bundle for goals_sweep.sh plus transformers' bf16 fidelity check (torch_bf16_fidelity.py): .device/carry_goals
# with peregrine, the deps' libraries, llama-3-8b.json, pycoder-tiny's weights (the tree's copy stays out:
# scripts/device/carry_light.sh on before the call, off right after) and its reference.
# There: source .device/carry_goals/env.sh && scripts/device/goals_bundle.sh place, then goals_sweep.sh and
#   python3 scripts/device/torch_bf16_fidelity.py models/pycoder-tiny .device/fid/pycoder-tiny.reference.json
set -uo pipefail
case "${1:?bundle or place}" in
  bundle)
    source "$(dirname "$0")/bundle_lib.sh"
    mkdir -p "$stage/bin" "$stage/shared/configs" "$stage/model" "$stage/fid"
    cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
    cp "$b/peregrine" "$stage/bin/" && strip "$stage/bin/peregrine"
    cp ../shared/configs/llama-3-8b.json "$stage/shared/configs/"
    cp models/pycoder-tiny/model.safetensors "$stage/model/"
    cp ../shared/models/pycoder-tiny.reference.json "$stage/fid/"
    pack .device/carry_goals deps bin shared model fid
    ;;
  place)  # the weights back into the tree's model folder
    [ -f models/pycoder-tiny/model.safetensors ] || cp .device/model/model.safetensors models/pycoder-tiny/
    ;;
esac
