#!/usr/bin/env bash
# The benchmark call on the H200 (after the six vLLM parts are stashed, see ../shared/gpu/README.md):
# installs vLLM, flash-attn and the tokenizer package, runs the GPU tests (fused kernels off for the
# benchmark if their test fails), then nanoserve and vLLM back to back on GPU 0 via bench_all.sh.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/final_out}; mkdir -p "$OUT"
bash .gpu/stash.sh .gpu/vllm install >"$OUT/install.log" 2>&1 || { tail "$OUT/install.log"; echo "vLLM install failed"; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"
if ! timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_kernels_cuda.py >/dev/null 2>&1; then
  echo "fused kernels failed their GPU test: benchmarking with fused_kernels=false"
  export NANOSERVE_ARGS="--engine-arg fused_kernels=false ${NANOSERVE_ARGS:-}"
fi
OUT=$OUT bash scripts/gpu/bench_all.sh
