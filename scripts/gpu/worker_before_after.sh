#!/usr/bin/env bash
# One H200 call: the same nanoserve benchmark on two trees back to back, each run from inside its own tree
# (BEFORE and AFTER, each a copy of the repository or at least of nanoserve/), then process start -> ready
# for both, and a table of after/before ratios. KIT holds flash_attn-*.whl, wheels/ and config.json.
#   KIT=.gpu BEFORE=.gpu/before AFTER=.gpu/after OUT=/tmp/ba bash .gpu/after/scripts/gpu/worker_before_after.sh
set -uo pipefail
KIT=$(realpath "${KIT:-.gpu}"); BEFORE=$(realpath "$BEFORE"); AFTER=$(realpath "$AFTER")
OUT=${OUT:-/tmp/worker_ba}; mkdir -p "$OUT/before" "$OUT/after"
MODEL=${MODEL:-/tmp/qwen3-0.6b}
WORKLOADS=${WORKLOADS:-random,shared-prefix,high-churn,prefill-bound,latency}
python3 -c "import flash_attn" 2>/dev/null || PYTHONPATH=/tmp/site python3 -c "import flash_attn" 2>/dev/null \
  || python3 -m pip install -q --no-index --no-deps --target /tmp/site "$KIT"/flash_attn-*.whl "$KIT"/wheels/*.whl
export PYTHONUNBUFFERED=1
if [ ! -f "$MODEL/config.json" ]; then
  (cd "$BEFORE" && PYTHONPATH=/tmp/site:$BEFORE python3 -m nanobench build-model --config "$KIT/config.json" \
    --out "$MODEL" --no-tokenizer >"$OUT/build.log" 2>&1) || { tail -20 "$OUT/build.log"; exit 1; }
fi
ARGS=(--engine nanoserve --workload "$WORKLOADS" --model "$MODEL" --runs "${RUNS:-2}" --tag h200 --gpu-util 0.9
      --weights-note "random weights, exact Qwen3-0.6B shapes" --skip-tokenizer-init yes)
for side in before after; do
  root=$BEFORE; [ "$side" = after ] && root=$AFTER
  echo "[ba] $side: start $(date -u +%H:%M:%S), imports $(cd "$root" && PYTHONPATH=$root python3 -c "import nanoserve; print(nanoserve.__file__)" 2>/dev/null)"
  (cd "$root" && PYTHONPATH=/tmp/site:$root timeout "${BENCH_TIMEOUT:-220}" python3 -m nanobench "${ARGS[@]}" \
    --out "$OUT/$side" --session "$side" >"$OUT/$side.log" 2>&1)
  echo "[ba] $side: exit $? $(date -u +%H:%M:%S)"; grep -E "Error|Traceback" "$OUT/$side.log" | head -5
done
for side in before after after before; do  # process start -> an engine ready to generate, twice each, interleaved
  root=$BEFORE; [ "$side" = after ] && root=$AFTER
  t0=$(date +%s.%N)
  (cd "$root" && PYTHONPATH=/tmp/site:$root timeout 120 python3 -c "
from nanoserve import LLM, SamplingParams
llm = LLM('$MODEL', skip_tokenizer_init=True, gpu_memory_utilization=0.9)
llm.generate([dict(prompt_token_ids=[1, 2, 3])], SamplingParams(max_tokens=2), use_tqdm=False)
" >"$OUT/ready_$side.log" 2>&1)
  echo "[ba] process start -> ready, $side: $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s (exit $?)"
done
python3 "$AFTER/scripts/gpu/compare_before_after.py" "$OUT/before" "$OUT/after" | tee "$OUT/table.txt"
