#!/usr/bin/env bash
# `o` and `down` split over K at small batch, the next norm adding the partial sums (splitk_probe.py), or with
# MODE=exported the GPU suite and split_engine_probe.py on chapter 10's exported version; flash-attn 2 alone (nothing
# stashed). Carrying the flash-attn wheel, .gpu/wheels and .gpu/tokenizer. Results go to $OUT; LIMIT (default 16) is
# the largest step, in rows, that takes the probe's split projections.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/splitk_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [[ ${MODE:-probe} == probe ]]; then
  timeout "${PROBE_LIMIT:-400}" python3 scripts/gpu/splitk_probe.py "$OUT/splitk.json" "${LIMIT:-16}" 2>&1 \
    | grep -v -i "warn" | tee "$OUT/probe.log" | tail -30
else  # MODE=exported: the GPU suite, then the engine as exported against SPLIT_MAX_ROWS = 0
  timeout "${TEST_LIMIT:-150}" python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
  echo "GPU suite (flash-attn 2): exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -5; tail -1 "$OUT/gpu_tests.log"
  timeout "${PROBE_LIMIT:-200}" python3 scripts/gpu/split_engine_probe.py "$OUT/split_engine.json" 2>&1 \
    | grep -v -i "warn" | tee "$OUT/engine.log" | tail -12
fi
echo "splitk_call: ${SECONDS} s"
