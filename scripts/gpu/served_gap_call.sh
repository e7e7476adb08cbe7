#!/usr/bin/env bash
# Where a served step's time goes on a GPU host: scripts/serve_overhead.py with the random Qwen3-0.6B served by
# nanoserve (flash-attn 2), 200 streams at once (engine step and period served, without HTTP and offline; the loop
# thread's CPU per token), then split_cold_start_probe.py (fresh starts on empty kernel caches, split and not).
# Carrying the flash-attn wheel, .gpu/wheels and .gpu/tokenizer; results go to $OUT. SKIP_COLD=1 skips the starts.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/served_gap_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; nproc; python3 -c "import httpx, uvicorn, fastapi; print('httpx', httpx.__version__)"
MODEL=$(python3 -c "import sys; sys.path.insert(0, 'scripts/gpu'); from probe_timing import random_qwen3_0_6b as r; print(r())" 2>/dev/null | tail -1)
for n in ${STREAMS:-200}; do
  timeout "${SERVE_LIMIT:-300}" python3 scripts/serve_overhead.py --model "$MODEL" --concurrency "$n" \
    --runs "${RUNS:-3}" --label "gpu_streams$n" --out "$OUT/serve_overhead_gpu.json" 2>"$OUT/serve_$n.err" | tail -30
  echo "serve_overhead $n streams: exit $?"; grep -E "Error|Traceback" "$OUT/serve_$n.err" | head -5
done
if [[ ${SKIP_COLD:-0} != 1 ]]; then
  timeout "${COLD_LIMIT:-240}" python3 scripts/gpu/split_cold_start_probe.py "$OUT/split_cold_start.json" 2>&1 | tail -4
fi
echo "served_gap_call: ${SECONDS} s"
