#!/usr/bin/env bash
# The real model on the H200 (no network there): the SmolLM2 GGUF travels in three parts (.gpu/smol1..3, each
# ~33 MB, made on the CPU machine with `split -n 3`), one call each, right after one another (/root/stash lasts
# while the machine stays warm):
#   bash scripts/gpu/real_model_call.sh stash 1|2      copy that part into /root/stash
#   bash scripts/gpu/real_model_call.sh run CHAPTERS    join and check the file, install flash-attn and gguf, record
#                                                       the chapters' GPU cells, run the GPU tests
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
S=/root/stash/smol; mkdir -p "$S"
if [[ "$1" == stash ]]; then cp .gpu/smol$2/* "$S/" && ls -la "$S"; exit $?; fi
shift
source scripts/gpu/smol_join.sh || exit 1
OUT=${OUT:-/tmp/real_out}; mkdir -p "$OUT"
timeout 400 python3 scripts/gpu/run_gpu_cells.py "$@" --out "$OUT" >"$OUT/cells.log" 2>&1; echo "gpu cells exit $?"
grep -iE "error|Traceback|failed" "$OUT/cells.log" | head -20
timeout 150 python3 -m pytest -q -x tests/gpu/test_real_model_gpu.py -p no:cacheprovider >"$OUT/gpu_tests.log" 2>&1
echo "real-model GPU test exit $?"; tail -5 "$OUT/gpu_tests.log"
ls "$OUT"
