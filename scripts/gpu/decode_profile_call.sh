#!/usr/bin/env bash
# One GPU call that needs nothing stashed (flash-attn 2 only): where a large decode step's time goes
# (decode_profile.py: kernels per step by kind at 256/128/64/1 lanes, and the GEMMs alone), then nanoserve on
# every workload with its default token budget and with 16,384 (vLLM's and nano-vllm's on this GPU),
# each with its step timeline. Carry the flash-attn wheel and .gpu/tokenizer; set NANOSERVE_GIT_COMMIT.
# $OUT gets decode_profile_<tag>.json, the two bench bundles and their logs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT=${OUT:-/tmp/decode_profile}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
timeout 200 python3 scripts/gpu/decode_profile.py --out "$OUT" --tag "${GPU:-gpu}" --lanes 256,64,1 >"$OUT/decode_profile.log" 2>&1
echo "decode_profile: exit $? at ${SECONDS} s"
for budget in default 16384; do
  args=""; [[ $budget == default ]] || args="--max-num-batched-tokens $budget"
  env OUT=/tmp/budget_$budget MODEL=/tmp/qwen3-0.6b CONFIG=qwen3-0.6b ENGINES=nanoserve RUNS=${RUNS:-3} \
    WORKLOADS=${WORKLOADS:-random,shared-prefix,high-churn,prefill-bound,latency} NANOSERVE_TIMEOUT=200 TAG=${GPU:-gpu}-budget-$budget NANOSERVE_ARGS="$args" \
    bash scripts/gpu/bench_all.sh >"$OUT/budget_$budget.out" 2>&1
  cp /tmp/budget_$budget/results.json "$OUT/budget_$budget.json" 2>/dev/null
  echo "== budget $budget"; grep -v '^\[bench' "$OUT/budget_$budget.out" | tail -9
done
tail -40 "$OUT/decode_profile.log"
echo "decode_profile_call: ${SECONDS} s"
