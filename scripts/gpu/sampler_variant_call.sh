#!/usr/bin/env bash
# One GPU call (it may follow a stash in the same command): the sampler's and the fused kernels' GPU tests, then
# sampler_variant_probe.py. Chapter 10's run compared f699d9f's sampler (tl.rand) with 9f5af32's (tl.rand4x); the
# device copy's .git holds the session's starting commit, so pass other versions as files: VARIANT=FILE adds one.
# Carry the flash-attn wheel (and VARIANT's file); set NANOSERVE_GIT_COMMIT. $OUT gets the JSON and the logs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT=${OUT:-/tmp/sampler_variants}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_sampler_cuda.py tests/gpu/test_fused_kernels_cuda.py \
  >"$OUT/kernel_tests.log" 2>&1
echo "kernel tests: $(tail -1 "$OUT/kernel_tests.log")"; grep -E "^(FAILED|ERROR)" "$OUT/kernel_tests.log" | head -10
timeout 120 python3 scripts/gpu/sampler_variant_probe.py --arm tree ${VARIANT:+--arm "variant=$VARIANT"} --out "$OUT" \
  --tag "${GPU:-gpu}" >"$OUT/sampler_variant_probe.log" 2>&1
echo "sampler variant probe: exit $?"; tail -6 "$OUT/sampler_variant_probe.log"
echo "sampler_variant_call: ${SECONDS} s"
