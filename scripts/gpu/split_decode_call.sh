#!/usr/bin/env bash
# Small-batch decode in one Triton launch, measured on the H200 with flash-attn-4 on the path ('auto' picks it):
# split_decode_probe.py (the kernels alone, then decode TPOT with and without it) and, with TESTS=1, the GPU suite.
# After `flash4_call.sh stash a|b|c`, carrying the flash-attn wheel, .gpu/wheels and .gpu/tokenizer. Results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/split_decode_out}; mkdir -p "$OUT"
source scripts/gpu/install_flash4.sh || exit 1
export PYTHONPATH=$WITH_FA4:$PWD:$PWD/scripts/gpu PYTHONUNBUFFERED=1 MPLBACKEND=Agg
timeout "${PROBE_LIMIT:-420}" python3 scripts/gpu/split_decode_probe.py "$OUT/split_decode_h200.json" 2>&1 | grep -v -i "warn" | tail -40
[[ ${TESTS:-0} == 1 ]] && { timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
  echo "GPU suite: exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -5; tail -2 "$OUT/gpu_tests.log"; }
echo "split_decode_call: ${SECONDS} s"
