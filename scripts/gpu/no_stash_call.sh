#!/usr/bin/env bash
# One GPU call that needs nothing stashed (flash-attn 2 only), its steps in order of value, each with a time limit:
# the decode GEMM probe (decode_gemm_probe.py, about a minute), the engine with its best tiles against cuBLAS
# (decode_gemm_engine_probe.py, about three minutes; ENGINE_GEMM=0 skips it), the batch-1/8/32 TPOT with `o` and
# `down` split and not (split_engine_probe.py), the GPU suite, then start -> ready on empty and warm Triton caches
# (compile_together_probe.py, ROUNDS rounds). Results are named by the card.
#   OUT=$OUT NANOSERVE_GIT_COMMIT=<sha> ROUNDS=2 bash scripts/gpu/no_stash_call.sh
#   (carry .gpu/flash_attn-*.whl and .gpu/tokenizer)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/no_stash_out}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
step() {  # LIMIT NAME COMMAND...: one step, its output tee'd into $OUT/NAME.log, its exit and time printed
  local limit=$1 name=$2; shift 2; local t0=$SECONDS
  echo "== $name"
  timeout -k 10 "$limit" "$@" 2>&1 | grep -v -i "warn" | tee "$OUT/$name.log" | tail -14
  echo "$name: exit ${PIPESTATUS[0]}, $((SECONDS - t0)) s"
}
step "${GEMM_LIMIT:-100}" decode_gemm python3 scripts/gpu/decode_gemm_probe.py "$OUT/decode_gemm_$GPU.json"
[[ ${ENGINE_GEMM:-1} == 1 ]] && step "${ENGINE_GEMM_LIMIT:-240}" decode_gemm_engine python3 \
  scripts/gpu/decode_gemm_engine_probe.py "$OUT/decode_gemm_engine_$GPU.json" "$OUT/decode_gemm_$GPU.json"
step "${SPLIT_LIMIT:-170}" split_engine python3 scripts/gpu/split_engine_probe.py "$OUT/split_engine_$GPU.json"
step "${SUITE_LIMIT:-120}" gpu_suite python3 -m pytest -q -p no:cacheprovider tests/gpu
step "${PROBE_LIMIT:-200}" compile_together env ROUNDS="${ROUNDS:-2}" \
  python3 scripts/gpu/compile_together_probe.py "$OUT/compile_together_$GPU.json"
echo "no_stash_call: ${SECONDS} s"
