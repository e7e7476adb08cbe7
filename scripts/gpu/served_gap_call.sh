#!/usr/bin/env bash
# The served engine on a GPU host, random Qwen3-0.6B on flash-attn 2, 200 streams of 512 in / 128 out at once:
#   1. scripts/serve_saturation.py --compare worker: the engine on a thread of the server's process against the
#      engine in a process of its own (chapter 16 section 6), two servers up at once, bursts alternating;
#   2. scripts/serve_overhead.py: engine step and period served, without HTTP and offline; the loop's CPU per token;
#   3. split_cold_start_probe.py: fresh starts on empty kernel caches, split projections and not (SKIP_COLD=1 skips).
# On an H200, split_engine_probe.py (batch-1/8/32 TPOT, split projections and not) runs in place of step 2.
# Carrying the flash-attn wheel, .gpu/wheels (gguf, and fastapi, uvicorn, httpx, prometheus-client with their
# dependencies as cp312 wheels: a fresh machine has none of them) and .gpu/tokenizer; results go to $OUT. Set
# NANOSERVE_GIT_COMMIT to this checkout's commit in the command: the device copy's .git can be older than its files.
# COMPARE=gc runs serve_saturation.py --compare gc in step 1 instead.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/served_gap_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; nproc; python3 -c "import httpx, uvicorn, fastapi; print('httpx', httpx.__version__)"
MODEL=$(python3 -c "import sys; sys.path.insert(0, 'scripts/gpu'); from probe_timing import random_qwen3_0_6b as r; print(r())" 2>/dev/null | tail -1)
timeout "${SAT_LIMIT:-240}" python3 scripts/serve_saturation.py --compare "${COMPARE:-worker}" --model "$MODEL" \
  --repeats "${REPEATS:-3}" --out "$OUT/serve_${COMPARE:-worker}_gpu.json" >"$OUT/saturation.log" 2>&1
echo "serve_saturation: exit $?"; grep -v -i "warn" "$OUT/saturation.log" | tail -9
if nvidia-smi -L | grep -q H200 && [[ ${SKIP_TPOT:-0} != 1 ]]; then  # chapter 10's split projections: H100 only so far
  timeout "${TPOT_LIMIT:-170}" python3 scripts/gpu/split_engine_probe.py "$OUT/split_engine_h200.json" 2>&1 \
    | grep -v -i "warn" | tail -10
  SKIP_OVERHEAD=${SKIP_OVERHEAD:-1}
fi
if [[ ${SKIP_OVERHEAD:-0} != 1 ]]; then
  timeout "${SERVE_LIMIT:-200}" python3 scripts/serve_overhead.py --model "$MODEL" --concurrency 200 \
    --runs "${RUNS:-2}" --label gpu_streams200 --out "$OUT/serve_overhead_gpu.json" 2>"$OUT/serve_overhead.err" | tail -26
  echo "serve_overhead: exit $?"; grep -E "Error|Traceback" "$OUT/serve_overhead.err" | head -5
fi
if [[ ${SKIP_COLD:-0} != 1 ]]; then
  timeout "${COLD_LIMIT:-150}" python3 scripts/gpu/split_cold_start_probe.py "$OUT/split_cold_start.json" 2>&1 | tail -4
fi
echo "served_gap_call: ${SECONDS} s"
