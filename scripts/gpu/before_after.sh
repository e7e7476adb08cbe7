#!/usr/bin/env bash
# One H200 call: the GPU tests, then the same nanoserve benchmark on two trees back to back — the package
# as it was before a refactor (.gpu/before/nanoserve, e.g. `git archive <commit> nanoserve | tar -x -C .gpu/before`)
# and the working tree — and a table of after/before ratios. Carry .gpu/before with the usual .gpu kit.
#   bash scripts/gpu/before_after.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/before_after}; mkdir -p "$OUT/before" "$OUT/after"
MODEL=${MODEL:-/tmp/qwen3-0.6b}
WORKLOADS=${WORKLOADS:-random,shared-prefix,latency}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONUNBUFFERED=1
if [ "${SKIP_GPU_TESTS:-0}" != 1 ]; then
  PYTHONPATH=/tmp/site:$PWD timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -20
fi
if [ ! -f "$MODEL/config.json" ]; then
  PYTHONPATH=/tmp/site:$PWD/.gpu/before python3 -m nanobench build-model --config .gpu/config.json --out "$MODEL" \
    --tokenizer-from .gpu/tokenizer >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
fi
ARGS=(--engine nanoserve --workload "$WORKLOADS" --model "$MODEL" --runs "${RUNS:-2}" --tag h200 --gpu-util 0.9
      --weights-note "random weights, exact Qwen3-0.6B shapes")
for side in before after; do
  root=$PWD; [ "$side" = before ] && root=$PWD/.gpu/before
  echo "[before_after] $side: start $(date -u +%H:%M:%S)"
  # run from inside the tree: `python -m` puts the working directory first on sys.path, so a PYTHONPATH
  # entry alone would still import the checkout's nanoserve
  (cd "$root" && PYTHONPATH=/tmp/site:$root timeout 200 python3 -m nanobench "${ARGS[@]}" \
    --out "$OUT/$side" --session "$side" >"$OUT/$side.log" 2>&1)
  echo "[before_after] $side: exit $? $(date -u +%H:%M:%S)"; grep -E "Error|Traceback" "$OUT/$side.log" | head -5
  echo "[before_after] $side imported $(cd "$root" && PYTHONPATH=$root python3 -c "import nanoserve; print(nanoserve.__file__)" 2>/dev/null)"
done
python3 scripts/gpu/compare_before_after.py "$OUT/before" "$OUT/after" | tee "$OUT/table.txt"
