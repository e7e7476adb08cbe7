#!/usr/bin/env bash
# Every workload on nanoserve, vLLM, nano-vllm and the transformers baseline, back to back on one H200, in ONE
# call (about 8 minutes). Run ON THE GPU MACHINE from the repository root, after the six vLLM parts were stashed
# by earlier calls (`bash .gpu/stash.sh .gpu/vllm K`, see ../shared/gpu/README.md). It expects in .gpu/:
#   flash_attn-*.whl, config.json (Qwen3-0.6B), tokenizer/ (`python -m nanobench build-tokenizer
#   .gpu/tokenizer`: nano-vllm loads a tokenizer), nano-vllm/ (its source: `git archive HEAD` of
#   GeeeekExplorer/nano-vllm, with its commit in nano-vllm/COMMIT) and wheels/ (xxhash, which nano-vllm needs).
#
#   OUT=/tmp/three_out bash scripts/gpu/three_engines.sh
#
# Returns $OUT/results.json (a bundle: `python -m nanobench unpack results.json` at home), $OUT/bench.log,
# and prints the engines-side-by-side table last. Knobs: ENGINES, WORKLOADS and the per-engine timeouts of
# bench_all.sh; the transformers baseline runs fewer requests (TRANSFORMERS_ARGS) to fit the budget.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT=${OUT:-/tmp/three_out}; mkdir -p "$OUT"
START=$(date +%s)

if [ ! -d /tmp/vsite/vllm ]; then
  bash .gpu/stash.sh .gpu/vllm install >"$OUT/install.log" 2>&1 || { tail -5 "$OUT/install.log"; echo "vLLM install failed: vLLM is skipped"; }
fi
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl >>"$OUT/install.log" 2>&1 \
  || echo "WARNING: flash-attn or the wheels in .gpu/wheels did not install (see install.log)"
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
echo "installs: $(( $(date +%s) - START )) s"

ENGINES=${ENGINES:-"nanoserve vllm nano-vllm transformers"} \
WORKLOADS=${WORKLOADS:-random,shared-prefix,high-churn,prefill-bound,latency} \
NANOSERVE_TIMEOUT=${NANOSERVE_TIMEOUT:-120} VLLM_TIMEOUT=${VLLM_TIMEOUT:-200} \
NANO_VLLM_TIMEOUT=${NANO_VLLM_TIMEOUT:-120} TRANSFORMERS_TIMEOUT=${TRANSFORMERS_TIMEOUT:-150} \
TAG=${TAG:-h200} bash scripts/gpu/bench_all.sh >"$OUT/bench_all.out" 2>&1
rc=$?
grep -v '^\[bench_all' "$OUT/bench_all.out" | tail -40   # the bundle line and the table, last
echo "three_engines: exit $rc after $(( $(date +%s) - START )) s"
exit $rc
