#!/usr/bin/env bash
# One GPU call that needs nothing stashed (flash-attn 2 only): the tokenizer change's effect on a start
# (startup_order.sh: the tree before it against this tree, and this tree loading the tokenizer first; its first start
# runs on empty kernel caches; COLD=N adds N more such starts), then nanoserve and nano-vllm back to back on every
# workload (bench_all.sh; nanoserve starts first, on empty kernel caches, and nano-vllm shares them). Carry the flash-attn wheel, .gpu/wheels, .gpu/tokenizer, .gpu/before
# and .gpu/nano-vllm; set NANOSERVE_GIT_COMMIT (REPS: pairs of starts, 3; PEER=0 skips the engines). $OUT gets startup_order.json, summary.txt, the bundle and the log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT=${OUT:-/tmp/start_and_peer}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
BEFORE_LABEL=transformers-tokenizer AFTER_LABEL=fast-tokenizer TOKENIZER_FIRST=1 REPS=${REPS:-3} COLD=${COLD:-0} OUT=$OUT \
  bash scripts/gpu/startup_order.sh
[[ ${PEER:-1} == 1 ]] || exit 0  # PEER=0: the start A/B alone
export XDG_CACHE_HOME=/tmp/peer_xdg TRITON_CACHE_DIR=/tmp/peer_triton; rm -rf "$XDG_CACHE_HOME" "$TRITON_CACHE_DIR"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE 'H100|H200|A100|L40S' | tr A-Z a-z)
env OUT=/tmp/peer MODEL=/tmp/qwen3-0.6b CONFIG=qwen3-0.6b ENGINES="nanoserve nano-vllm" RUNS=${RUNS:-3} \
  WORKLOADS=random,shared-prefix,high-churn,prefill-bound,latency NANOSERVE_TIMEOUT=150 NANO_VLLM_TIMEOUT=170 \
  TAG=${GPU:-gpu}-fa2 bash scripts/gpu/bench_all.sh >"$OUT/peer.out" 2>&1
grep "process start to ready" /tmp/peer/bench.log; grep -v '^\[bench' "$OUT/peer.out" | tail -16
cp /tmp/peer/results.json "$OUT/peer.json"; cp /tmp/peer/bench.log "$OUT/peer_bench.log"
echo "start_and_peer_call: ${SECONDS} s"
