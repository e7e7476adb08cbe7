#!/usr/bin/env bash
# The RMSNorm folded into qkv and gate_up at small batch (norm_matmul_probe.py), with flash-attn-4 on the path ('auto'
# picks it on Hopper; FA=2: flash-attn 2 alone), then the GPU suite (TESTS=1). After `flash4_call.sh stash X` for X = p0 p1 p2 p3 c2, carrying the
# flash-attn wheel, .gpu/wheels and .gpu/tokenizer. Results go to $OUT; LIMIT (default 16) is the largest step, in
# rows, that takes the fused launch.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/norm_matmul_out}; mkdir -p "$OUT"
if [[ ${FA:-4} == 2 ]]; then  # flash-attn 2 alone: nothing stashed is needed
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl; WITH_FA4=/tmp/site
else source scripts/gpu/install_flash4.sh || exit 1; fi
export PYTHONPATH=$WITH_FA4:$PWD PYTHONUNBUFFERED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
timeout "${PROBE_LIMIT:-420}" python3 scripts/gpu/norm_matmul_probe.py "$OUT/norm_matmul.json" "${LIMIT:-16}" 2>&1 \
  | grep -v -i "warn" | tee "$OUT/probe.log" | tail -40
[[ ${TESTS:-0} == 1 ]] && { timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
  echo "GPU suite: exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -5; tail -2 "$OUT/gpu_tests.log"; }
echo "norm_matmul_call: ${SECONDS} s"
