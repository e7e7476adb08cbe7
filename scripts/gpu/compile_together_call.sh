#!/usr/bin/env bash
# Chapter 10 section 9 on a GPU, in two calls of at most 10 minutes each:
#   STAGE=probe: the rehearsal's GPU test (every variant compiled inside it, none after), the fused-kernel and sampler
#     tests, then compile_together_probe.py (start -> ready on empty and warm Triton caches: the variants compiled as
#     met, rehearsed on 1 compile thread, on 8), ROUNDS rounds of six fresh starts (about 90 s a round);
#   STAGE=suite: the whole GPU suite (the change touches every Triton launch and every start).
#   OUT=$OUT NANOSERVE_GIT_COMMIT=<sha> STAGE=probe ROUNDS=3 bash scripts/gpu/compile_together_call.sh
#   (carry .gpu/flash_attn-*.whl and .gpu/tokenizer)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/compile_together_out}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
if [[ ${STAGE:-probe} == probe ]]; then
  timeout ${TEST_LIMIT:-150} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_compile_variants_gpu.py \
    tests/gpu/test_fused_kernels_cuda.py tests/gpu/test_sampler_cuda.py >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"
  grep -E "^(FAILED|ERROR)|Error" "$OUT/gpu_tests.log" | head -20
  ROUNDS=${ROUNDS:-3} timeout ${PROBE_LIMIT:-380} python3 scripts/gpu/compile_together_probe.py \
    "$OUT/compile_together_$GPU.json" 2>&1 | tail -30
else
  timeout ${SUITE_LIMIT:-540} python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_suite.log" 2>&1
  echo "gpu suite: $(tail -1 "$OUT/gpu_suite.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.log" | head -20
fi
