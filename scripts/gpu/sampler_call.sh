#!/usr/bin/env bash
# One GPU call that needs nothing stashed (flash-attn 2 only): the GPU test suite (chapter 10's sampler included),
# then sampler_probe.py (the one-pass sampler against graph_sample: kernels, a decode step, the random workload).
# Carry the flash-attn wheel; set NANOSERVE_GIT_COMMIT. $OUT gets sampler_<tag>.json and the logs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT=${OUT:-/tmp/sampler}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_sampler_cuda.py >"$OUT/sampler_tests.log" 2>&1
echo "sampler tests: $(tail -1 "$OUT/sampler_tests.log")"; grep -E "^(FAILED|ERROR)|Error" "$OUT/sampler_tests.log" | head -10
timeout 240 python3 scripts/gpu/sampler_probe.py --out "$OUT" --tag "${GPU:-gpu}" >"$OUT/sampler_probe.log" 2>&1
echo "sampler probe: exit $? at ${SECONDS} s"
if [[ ${SUITE:-1} == 1 ]]; then
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu --ignore tests/gpu/test_sampler_cuda.py \
    >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -10
fi
tail -12 "$OUT/sampler_probe.log"
echo "sampler_call: ${SECONDS} s"
