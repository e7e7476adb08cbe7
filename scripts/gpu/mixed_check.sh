#!/usr/bin/env bash
# One H200 call for the mixed-step graphs: the GPU tests, the GPU cells of chapters 11-13 recorded, the import
# profile, then nanoserve alone on every workload at the default max_num_seqs (256) and at 512 with a 16,384-token
# budget (VARIANTS="" skips the benchmark; PROFILE=1 adds scripts/gpu/profile_steps.py). Carry .gpu/flash_attn-*.whl, .gpu/config.json and .gpu/wheels.
#   OUT=/tmp/mixed_out bash scripts/gpu/mixed_check.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/mixed_out}; mkdir -p "$OUT"
START=$(date +%s)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl \
  >"$OUT/install.log" 2>&1 || echo "WARNING: wheels did not install (install.log)"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg CUDA_VISIBLE_DEVICES=0
python3 -X importtime -c "from nanoserve import LLM" 2>"$OUT/importtime.txt"
echo "import: $(sort -t'|' -k2 -n "$OUT/importtime.txt" | tail -4 | tr -s ' ' | cut -d'|' -f2,3 | tr '\n' ';')"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log") after $(( $(date +%s) - START )) s"
grep -E "^(FAILED|ERROR)|Error" "$OUT/gpu_tests.log" | head -12
timeout 300 python3 scripts/gpu/run_gpu_cells.py chapters/11_async_scheduling.ipynb chapters/12_mixed_step_graphs.ipynb \
  chapters/13_cascade_attention.ipynb --out "$OUT" >"$OUT/cells.log" 2>&1
echo "chapters 11-13 cells exit $? after $(( $(date +%s) - START )) s"
grep -iE "Traceback|Error" "$OUT/cells.log" | head -8
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for f in pathlib.Path(sys.argv[1]).glob("12_*.json"):
    for name, cell in json.loads(f.read_text())["cells"].items():
        if name.startswith("mixed"):
            print(f"--- {name}")
            for out in cell["outputs"]:
                print(out.get("text", "").rstrip())
PY
if [ "${PROFILE:-0}" = 1 ]; then
  timeout 240 python3 scripts/gpu/profile_steps.py --out "$OUT" --tag "${PROFILE_TAG:-h200}" >"$OUT/profile.log" 2>&1
  echo "profile exit $? after $(( $(date +%s) - START )) s"; grep -v "^\s*$" "$OUT/profile.log" | grep -v "Writing\|Loading" | tail -50
fi
for variant in ${VARIANTS-default 512}; do
  args=""; [ "$variant" = 512 ] && args="--max-num-seqs 512 --max-num-batched-tokens 16384"
  OUT="$OUT/bench_$variant" ENGINES=nanoserve WORKLOADS=${BENCH_WORKLOADS:-random,shared-prefix,high-churn,prefill-bound,latency} RUNS=2 \
    NANOSERVE_TIMEOUT=200 TAG="h200-mixed-$variant" NANOSERVE_ARGS="$args" bash scripts/gpu/bench_all.sh 2>&1 | tail -14
  echo "bench $variant done after $(( $(date +%s) - START )) s"
done
