#!/usr/bin/env bash
# Tests chapter 15's candidate "FA3 is the gap" (issue 36): vLLM with its default attention (FlashAttention 3 on
# Hopper) and with attention_config={"flash_attn_version": 2}, beside nanoserve (flash-attn 2), on the long-prompt and the random
# workload, back to back in one call on random Qwen3-0.6B weights. vLLM comes from the eight
# `spec_call.sh stash spec/NN` calls just before; carry .gpu/spec/08, .gpu/spec/SHA256, the flash-attn wheel and
# .gpu/wheels.
#
#   OUT=$OUT bash scripts/gpu/vllm_fa_versions.sh     (then $OUT/fa3/results.json, $OUT/fa2/results.json)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/fa_out}; mkdir -p "$OUT"
bash scripts/gpu/install_spec_pack.sh || exit 1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl 2>/dev/null
export CONFIG=qwen3-0.6b MODEL=/tmp/qwen3-0.6b WORKLOADS=${WORKLOADS:-prefill-bound,random} RUNS=${RUNS:-5}
OUT=$OUT/fa3 ENGINES=${FA3_ENGINES:-"nanoserve vllm"} TAG=h200-vllm-default bash scripts/gpu/bench_all.sh | tail -12
# vLLM 0.24 ignores VLLM_FLASH_ATTN_VERSION ("Unknown vLLM environment variable", 2026-12-03): the version is an engine option
OUT=$OUT/fa2 ENGINES=vllm TAG=h200-vllm-fa2 VLLM_ARGS='--engine-arg attention_config={"flash_attn_version":2}' \
  bash scripts/gpu/bench_all.sh | tail -8
grep -h "FlashAttention version" "$OUT"/fa*/bench.log | cut -c1-200  # the check that each run used the version asked for
echo "vllm_fa_versions: done after ${SECONDS} s"
