#!/usr/bin/env bash
# Chapter 10 section 9 on a GPU, in one call of under 10 minutes: the whole GPU suite (the rehearsal touches every
# Triton launch and every start; about a minute on flash-attn 2), then compile_together_probe.py (start -> ready on
# empty and warm Triton caches: the variants compiled as met, rehearsed on 1 compile thread, on 8), ROUNDS rounds of
# six fresh starts (about 90 s a round).
#   OUT=$OUT NANOSERVE_GIT_COMMIT=<sha> ROUNDS=3 bash scripts/gpu/compile_together_call.sh
#   (carry .gpu/flash_attn-*.whl and .gpu/tokenizer)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/compile_together_out}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
timeout ${SUITE_LIMIT:-200} python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_suite.log" 2>&1
echo "gpu suite: $(tail -n 1 "$OUT/gpu_suite.log")"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.log" | head -20
ROUNDS=${ROUNDS:-3} timeout ${PROBE_LIMIT:-360} python3 scripts/gpu/compile_together_probe.py \
  "$OUT/compile_together_$GPU.json" 2>&1 | tail -30
