#!/usr/bin/env bash
# One H200 call: start-up phases (cold and warm Triton cache) and every nanoserve workload, for two trees back to
# back, each imported from its own copy (BEFORE, AFTER: `git archive COMMIT nanoserve nanobench scripts | tar -x`).
# KIT holds flash_attn-*.whl, wheels/, config.json and tokenizer/. Run ON THE GPU MACHINE:
#   KIT=.gpu BEFORE=/tmp/before AFTER=/tmp/after OUT=/tmp/sba bash scripts/gpu/startup_before_after.sh
# Writes $OUT/startup_{before,after}_{cold,warm}.json, $OUT/{before,after}/*.json (nanobench results),
# $OUT/table.txt (after/before ratios) and prints the start-up lines and the table last.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KIT=$(realpath "${KIT:-.gpu}"); BEFORE=$(realpath "$BEFORE"); AFTER=$(realpath "$AFTER")
OUT=${OUT:-/tmp/sba}; mkdir -p "$OUT/before" "$OUT/after"
MODEL=${MODEL:-/tmp/qwen3-0.6b}
WORKLOADS=${WORKLOADS:-random,shared-prefix,high-churn,prefill-bound,latency}
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$KIT"/flash_attn-*.whl "$KIT"/wheels/*.whl \
  >"$OUT/install.log" 2>&1 || echo "WARNING: install failed (see install.log)"
export PYTHONUNBUFFERED=1
if [ ! -f "$MODEL/config.json" ]; then
  (cd "$AFTER" && PYTHONPATH=/tmp/site:$AFTER python3 -m nanobench build-model --config "$KIT/config.json" \
    --out "$MODEL" --tokenizer-from "$KIT/tokenizer" >"$OUT/build.log" 2>&1) || { tail -20 "$OUT/build.log"; exit 1; }
fi
# start-up: each tree cold (its own empty Triton cache), then each warm (the same cache again), interleaved
for pass in cold warm; do
  for side in before after; do
    root=$BEFORE; [ "$side" = after ] && root=$AFTER
    [ "$pass" = cold ] && rm -rf "/tmp/triton_$side"
    (cd /tmp && NANOBENCH_LAUNCHED_AT=$(date +%s.%N) TRITON_CACHE_DIR=/tmp/triton_$side PYTHONPATH=/tmp/site:$root \
      timeout 180 python3 "$HERE/startup_profile.py" --model "$MODEL" --label "$side" \
      --out "$OUT/startup_${side}_${pass}.json" >"$OUT/startup_${side}_${pass}.log" 2>&1) \
      || { echo "[sba] startup $side $pass failed:"; tail -5 "$OUT/startup_${side}_${pass}.log"; }
  done
done
ARGS=(--engine nanoserve --workload "$WORKLOADS" --model "$MODEL" --runs "${RUNS:-2}" --tag h200 --gpu-util 0.9
      --weights-note "random weights, exact Qwen3-0.6B shapes" --timeline)
for side in before after; do
  root=$BEFORE; [ "$side" = after ] && root=$AFTER
  echo "[sba] bench $side: start $(date -u +%H:%M:%S)"
  (cd "$root" && NANOBENCH_LAUNCHED_AT=$(date +%s.%N) TRITON_CACHE_DIR=/tmp/triton_$side \
    NANOSERVE_GIT_COMMIT=$(cat "$root/COMMIT" 2>/dev/null) PYTHONPATH=/tmp/site:$root \
    timeout "${BENCH_TIMEOUT:-200}" python3 -m nanobench "${ARGS[@]}" --out "$OUT/$side" --session "$side" \
    >"$OUT/bench_$side.log" 2>&1)
  echo "[sba] bench $side: exit $? $(date -u +%H:%M:%S)"; grep -E "Error|Traceback" "$OUT/bench_$side.log" | head -5
done
grep -h "^\[startup\]" "$OUT"/startup_*_cold.log "$OUT"/startup_*_warm.log
python3 "$HERE/compare_before_after.py" "$OUT/before" "$OUT/after" | tee "$OUT/table.txt"
