#!/usr/bin/env bash
# Chapter 10's q/k norm in the rotary launch, measured on the H200 with flash-attn-4 on the path ('auto' picks it):
# qk_fusion_probe.py (the kernels alone, then decode TPOT with and without it), the GPU suite, and chapter 09's GPU
# cells re-recorded (its decode buckets now start at 8). After `flash4_call.sh stash a|b|c`, carrying the
# flash-attn wheel, .gpu/wheels and .gpu/tokenizer. Results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/qk_fusion_out}; mkdir -p "$OUT"
source scripts/gpu/install_flash4.sh || exit 1
export PYTHONPATH=$WITH_FA4:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python3 scripts/gpu/qk_fusion_probe.py "$OUT/qk_fusion_h200.json" 2>&1 | grep -v -i "warn" | tail -20
[[ ${TESTS:-1} == 1 ]] && { timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
  echo "GPU suite: exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -5; tail -2 "$OUT/gpu_tests.log"; }
[[ ${CELLS:-1} == 1 ]] && { timeout 150 python3 scripts/gpu/run_gpu_cells.py chapters/09_cuda_graphs.ipynb --out "$OUT" \
  >"$OUT/cells.log" 2>&1; echo "chapter 09 cells: exit $?"; grep -E "Error|Traceback" "$OUT/cells.log" | head -3; }
echo "qk_fusion_call: ${SECONDS} s"
