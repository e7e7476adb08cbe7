#!/usr/bin/env bash
# Appendix A5's first start on a GPU host (issue 36's start goal), flash-attn 2 alone, random Qwen3-0.6B:
#   1. cold_start_probe.py: fresh processes on empty kernel caches, every kernel compiled at start-up against a first
#      start that leaves Triton's to a background process, then the start after it, ROUNDS rounds (default 2);
#   2. the GPU suite's first-start test, then the rest of the GPU suite (SUITE=0 skips the rest).
# Carrying the flash-attn wheel, .gpu/wheels and .gpu/tokenizer; results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/first_start_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NANOSERVE_COMMIT=${NANOSERVE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
nvidia-smi -L
ROUNDS=${ROUNDS:-2} timeout "${PROBE_LIMIT:-330}" python3 scripts/gpu/cold_start_probe.py "$OUT/first_start.json" \
  2>"$OUT/first_start.err" | grep -v -i "warn" | head -14
echo "cold_start_probe: exit ${PIPESTATUS[0]}"; grep -E "Error|Traceback" "$OUT/first_start.err" | head -5
timeout "${TEST_LIMIT:-120}" python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernel_compile_gpu.py \
  >"$OUT/tests_first_start.log" 2>&1; echo "first-start test: exit $?"; tail -3 "$OUT/tests_first_start.log"
if [[ ${SUITE:-1} == 1 ]]; then
  timeout "${SUITE_LIMIT:-200}" python3 -m pytest -q -p no:cacheprovider tests/gpu \
    --deselect tests/gpu/test_kernel_compile_gpu.py >"$OUT/tests_gpu.log" 2>&1; echo "GPU suite: exit $?"
  tail -4 "$OUT/tests_gpu.log"
fi
echo "first_start_call: ${SECONDS} s"
