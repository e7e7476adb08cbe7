#!/usr/bin/env bash
# One GPU call that needs nothing stashed (flash-attn 2 only): the STEPS named, in order, each with a time limit.
#   decode_gemm         the projections at 64-256 rows, each way (decode_gemm_probe.py, about a minute)
#   decode_gemm_engine  the engine with the best tiles, with cuBLASLt, and as is (decode_gemm_engine_probe.py, reading
#                       decode_gemm's result; about five minutes)
#   split_engine        batch-1/8/32 TPOT with `o` and `down` split and not (split_engine_probe.py)
#   gpu_suite           tests/gpu; with TESTS="-k cascade" (any pytest arguments) only the tests it selects
#   compile_together    start -> ready on empty and warm Triton caches, ROUNDS rounds (compile_together_probe.py)
#   cascade_merge       chapter 13's merge in one launch against its torch form: kernel µs and the engine's
#                       shared-prefix tok/s with each and with the cascade off, twice (cascade_merge_probe.py,
#                       about four minutes)
# Results are named by the card. The default STEPS fit one call's 10 minutes; split_engine, gpu_suite and
# compile_together fit another.
#   OUT=$OUT NANOSERVE_GIT_COMMIT=<sha> [STEPS="..."] [ROUNDS=2] bash scripts/gpu/no_stash_call.sh
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
for name in ${STEPS:-decode_gemm decode_gemm_engine}; do
  case $name in
    decode_gemm) step "${GEMM_LIMIT:-100}" "$name" python3 scripts/gpu/decode_gemm_probe.py \
      "$OUT/decode_gemm_$GPU.json";;
    decode_gemm_engine) step "${ENGINE_GEMM_LIMIT:-400}" "$name" python3 scripts/gpu/decode_gemm_engine_probe.py \
      "$OUT/decode_gemm_engine_$GPU.json" "$OUT/decode_gemm_$GPU.json";;
    split_engine) step "${SPLIT_LIMIT:-170}" "$name" python3 scripts/gpu/split_engine_probe.py \
      "$OUT/split_engine_$GPU.json";;
    gpu_suite) step "${SUITE_LIMIT:-120}" "$name" python3 -m pytest -q -p no:cacheprovider tests/gpu ${TESTS:-};;
    cascade_merge) step "${MERGE_LIMIT:-420}" "$name" python3 scripts/gpu/cascade_merge_probe.py \
      "$OUT/cascade_merge_$GPU.json";;
    compile_together) step "${PROBE_LIMIT:-200}" "$name" env ROUNDS="${ROUNDS:-2}" \
      python3 scripts/gpu/compile_together_probe.py "$OUT/compile_together_$GPU.json";;
    *) echo "unknown step: $name"; exit 2;;
  esac
done
echo "no_stash_call: ${SECONDS} s"
