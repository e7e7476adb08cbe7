#!/usr/bin/env bash
# The last call of a session on one H200: the whole GPU test suite (the real model included), then chapter 18's
# step profile (scripts/gpu/spec_step_profile.py). The SmolLM2 GGUF goes first, in parts, one call each, right after
# one another (/root/stash lasts while the machine stays warm):
#   bash scripts/gpu/real_model_call.sh stash 1|2      (carry .gpu/smol1, then .gpu/smol2)
#   bash scripts/gpu/final_check.sh                    (carry .gpu/smol3, the flash-attn wheel and .gpu/wheels; when
#                                                       that is over 64 MiB, stash part 3 the same way first)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/smol_join.sh || exit 1
OUT=${OUT:-/tmp/final_out}; mkdir -p "$OUT"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -20
timeout 150 python3 scripts/gpu/spec_step_profile.py --out "$OUT" 2>&1 | grep -v "Writing model\|warn" | tail -14
