#!/usr/bin/env bash
# Chapter 10's KV store in the rotary launch, measured on the H200 with flash-attn-4 on the path ('auto' picks it):
# store_fold_probe.py (the kernels alone, cuBLAS switches for the projections, then decode TPOT with and without
# the fold), the phases of a first and a warm start (startup_profile.py), the GPU suite with flash-attn-4 on the path, and chapter 19's GPU cells re-recorded. After
# `flash4_call.sh stash a|b|c`, carrying the flash-attn wheel, .gpu/wheels and .gpu/tokenizer. Results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/store_fold_out}; mkdir -p "$OUT"
source scripts/gpu/install_flash4.sh >"$OUT/install.log" 2>&1 || { tail -5 "$OUT/install.log"; exit 1; }
export PYTHONPATH=$WITH_FA4:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
timeout 330 python3 scripts/gpu/store_fold_probe.py "$OUT/store_fold_h200.json" 2>&1 | grep -v -i "warn" | tail -40
# where a machine's first start goes (flash-attn 2 alone, its own empty caches), then a warm start
rm -rf /tmp/profile_xdg /tmp/profile_triton
for pass in cold warm; do
  NANOBENCH_LAUNCHED_AT=$(date +%s.%N) XDG_CACHE_HOME=/tmp/profile_xdg TRITON_CACHE_DIR=/tmp/profile_triton \
    PYTHONPATH=/tmp/site:$PWD timeout 120 python3 scripts/gpu/startup_profile.py --model /tmp/qwen3-0.6b-random \
    --label "$pass" --out "$OUT/startup_$pass.json" 2>&1 | grep '^\[startup\]'
done
[[ ${CELLS:-1} == 1 ]] && { timeout 150 python3 scripts/gpu/run_gpu_cells.py chapters/19_hopper_attention.ipynb \
  --out "$OUT" >"$OUT/cells.log" 2>&1; echo "chapter 19 cells: exit $?"; grep -E "Error|Traceback" "$OUT/cells.log" | head -3; }
timeout "$(( ${CALL_LIMIT:-580} - SECONDS ))" python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
echo "GPU suite, flash-attn-4 on the path: exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -5; tail -2 "$OUT/gpu_tests.log"
echo "store_fold_call: ${SECONDS} s"
