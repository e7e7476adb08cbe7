#!/usr/bin/env bash
# One call on a single H200 after a change to the engine: the GPU test suite, then nanoserve alone on the
# `random` and `latency` workloads (to compare with the last side-by-side numbers in benchmarks/results/).
#   bash scripts/gpu/check_after_change.sh      (carry .gpu: the flash-attn wheel and config.json)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/check_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -20
OUT=$OUT ENGINES=nanoserve WORKLOADS=${WORKLOADS:-random,latency} RUNS=${RUNS:-2} NANOSERVE_TIMEOUT=240 \
  bash scripts/gpu/bench_all.sh | tail -25
