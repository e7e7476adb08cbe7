#!/usr/bin/env bash
# One H200 call for a tree after an engine change: the GPU tests, then the GPU cells of the chapters named in
# CHAPTERS (recordings for scripts/gpu/merge_gpu_outputs.py). Run from the tree's root on the GPU machine;
# KIT holds flash_attn-*.whl and wheels/ (matplotlib and its dependencies for the chapter runs).
#   KIT=.gpu OUT=/tmp/check CHAPTERS="chapters/09_cuda_graphs.ipynb" bash scripts/gpu/worker_check.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
KIT=${KIT:-.gpu}; OUT=${OUT:-/tmp/worker_check}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$KIT"/flash_attn-*.whl "$KIT"/wheels/*.whl \
  >"$OUT/install.log" 2>&1 || tail -3 "$OUT/install.log"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
start=$(date +%s)
timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider tests/gpu ${PYTEST_ARGS:-} >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests ($(( $(date +%s) - start )) s): $(tail -1 "$OUT/gpu_tests.log")"
grep -E "^(FAILED|ERROR)|Error:" "$OUT/gpu_tests.log" | head -20
if [ -n "${CHAPTERS:-}" ]; then
  start=$(date +%s)
  timeout "${CELLS_TIMEOUT:-300}" python3 scripts/gpu/run_gpu_cells.py $CHAPTERS --out "$OUT" >"$OUT/cells.log" 2>&1
  echo "gpu cells exit $? ($(( $(date +%s) - start )) s)"
  grep -iE "error|Traceback" "$OUT/cells.log" | head -20
fi
ls "$OUT"
