#!/usr/bin/env bash
# One call on a GPU for chapter 10 section 9: the rehearsal's GPU test (every variant compiled inside it, none after),
# the fused-kernel and sampler tests, then compile_together_probe.py (start -> ready on empty and warm Triton caches,
# variants compiled as met against together on 1 and on 8 threads).
#   OUT=$OUT NANOSERVE_GIT_COMMIT=<sha> ROUNDS=3 bash scripts/gpu/compile_together_call.sh
#   (carry .gpu/flash_attn-*.whl and .gpu/tokenizer)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/compile_together_out}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
timeout ${TEST_LIMIT:-200} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_compile_variants_gpu.py \
  tests/gpu/test_fused_kernels_cuda.py tests/gpu/test_sampler_cuda.py >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"
grep -E "^(FAILED|ERROR)|Error" "$OUT/gpu_tests.log" | head -20
ROUNDS=${ROUNDS:-3} timeout ${PROBE_LIMIT:-360} python3 scripts/gpu/compile_together_probe.py \
  "$OUT/compile_together_$GPU.json" 2>&1 | tail -30
