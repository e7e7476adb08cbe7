#!/usr/bin/env bash
# One GPU call (it may follow a stash in the same command): the sampler's and the fused kernels' GPU tests, then
# rand4x_probe.py against the sampler of f699d9f (the device copy's .git holds that commit, or set BEFORE_FILE).
# Carry the flash-attn wheel; set NANOSERVE_GIT_COMMIT. $OUT gets rand4x_<tag>.json and the logs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT=${OUT:-/tmp/rand4x}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_sampler_cuda.py tests/gpu/test_fused_kernels_cuda.py \
  >"$OUT/kernel_tests.log" 2>&1
echo "kernel tests: $(tail -1 "$OUT/kernel_tests.log")"; grep -E "^(FAILED|ERROR)" "$OUT/kernel_tests.log" | head -10
BEFORE_FILE=${BEFORE_FILE:-/tmp/sampling_before.py}
[[ -f $BEFORE_FILE ]] || git show f699d9f:nanoserve/kernels/sampling.py >"$BEFORE_FILE"
timeout 120 python3 scripts/gpu/rand4x_probe.py --before "$BEFORE_FILE" --out "$OUT" --tag "${GPU:-gpu}" \
  >"$OUT/rand4x_probe.log" 2>&1
echo "rand4x probe: exit $?"; tail -6 "$OUT/rand4x_probe.log"
echo "rand4x_call: ${SECONDS} s"
