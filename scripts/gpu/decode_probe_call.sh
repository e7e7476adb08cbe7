#!/usr/bin/env bash
# A decode-attention probe on the H200 with flash-attn-4 on the path ('auto' picks it): `decode_probe_call.sh NAME`
# runs scripts/gpu/NAME.py (split_decode_probe: one Triton launch with the store folded in; decode_splits_probe:
# flash-attn-4's split-KV and the flash-attn 2 threshold) and, with TESTS=1, the GPU suite.
# After `flash4_call.sh stash a|b|c`, carrying the flash-attn wheel, .gpu/wheels and .gpu/tokenizer. Results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PROBE=${1:?probe name}; OUT=${OUT:-/tmp/$PROBE}; mkdir -p "$OUT"
source scripts/gpu/install_flash4.sh || exit 1
export PYTHONPATH=$WITH_FA4:$PWD:$PWD/scripts/gpu PYTHONUNBUFFERED=1 MPLBACKEND=Agg
timeout "${PROBE_LIMIT:-420}" python3 scripts/gpu/$PROBE.py "$OUT/${PROBE%_probe}_h200.json" 2>&1 | grep -v -i "warn" | tail -40
[[ ${TESTS:-0} == 1 ]] && { timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
  echo "GPU suite: exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -5; tail -2 "$OUT/gpu_tests.log"; }
echo "decode_probe_call $PROBE: ${SECONDS} s"
