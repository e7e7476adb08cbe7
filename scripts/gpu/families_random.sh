#!/usr/bin/env bash
# The `random` workload (chapter 15) on each supported family at its smallest real shape, one H200, nanoserve
# alone, one process per family: random weights, exact shapes from scripts/gpu/families_check.py.
#   bash scripts/gpu/families_random.sh     (carry the flash-attn wheel)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/families_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
SESSION=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for fam in ${FAMILIES:-qwen2.5-0.5b llama-3.2-1b qwen3-0.6b}; do
  python3 -c "import json, sys; sys.path.insert(0, 'scripts/gpu'); from families_check import FAMILIES; \
print(json.dumps(FAMILIES['$fam']))" >"/tmp/$fam.json"
  timeout 120 python3 -m nanobench build-model --config "/tmp/$fam.json" --out "/tmp/$fam" >>"$OUT/build.log" 2>&1
  timeout 200 python3 -m nanobench --engine nanoserve --workload random --model "/tmp/$fam" --out "$OUT" \
    --runs 1 --session "$SESSION" --tag "h200-$fam" --gpu-util 0.9 \
    --weights-note "random weights, exact $fam shapes" 2>&1 | grep '^\[bench\]' | tail -2
done
