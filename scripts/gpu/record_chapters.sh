#!/usr/bin/env bash
# The recording call on a 2-GPU H200 machine (right after final_bench.sh, same machine):
# tensor parallelism at TP=2 vs TP=1, then the gpu/multigpu cells of the chapters that have them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/record_out}; mkdir -p "$OUT"
python3 -c "import flash_attn" 2>/dev/null || PYTHONPATH=/tmp/site python3 -c "import flash_attn" 2>/dev/null \
  || python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
if [ "$(python3 -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
  timeout 200 python3 scripts/gpu/tp_check.py >"$OUT/tp_check.log" 2>&1; echo "tp_check exit $?"; tail -12 "$OUT/tp_check.log"
fi
timeout 300 python3 scripts/gpu/run_gpu_cells.py "$@" --out "$OUT" >"$OUT/cells.log" 2>&1; echo "gpu cells exit $?"
grep -iE "error|Traceback|failed" "$OUT/cells.log" | head -20
ls "$OUT"
