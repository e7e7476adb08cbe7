#!/usr/bin/env bash
# Chapter 09's smallest decode bucket, measured on the H200 with flash-attn-4 on the path ('auto' picks it):
# decode TPOT at batch 1-8 with buckets from 1 lane and from 8 (bucket_probe.py), cuBLAS against a Triton GEMV
# on Qwen3-0.6B's decode shapes (gemv_probe.py), then the GPU suite. After `flash4_call.sh stash a|b|c`, carrying
# the flash-attn wheel, .gpu/wheels and .gpu/tokenizer. Results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/min_lanes_out}; mkdir -p "$OUT"
source scripts/gpu/install_flash4.sh || exit 1
export PYTHONPATH=$WITH_FA4:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python3 scripts/gpu/bucket_probe.py auto "$OUT/decode_min_lanes_h200.json" 2>&1 | grep -v -i "warn" | tail -8
[[ ${GEMV:-1} == 1 ]] && python3 scripts/gpu/gemv_probe.py --out "$OUT/small_m_gemm_h200.json" 2>&1 | grep -v -i warn | tail -8
[[ ${TESTS:-1} == 1 ]] && { timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
  echo "GPU suite: exit $?"; tail -4 "$OUT/gpu_tests.log"; }
echo "min_lanes_call: ${SECONDS} s"
