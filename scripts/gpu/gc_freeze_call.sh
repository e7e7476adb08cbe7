#!/usr/bin/env bash
# One GPU call that needs nothing stashed (flash-attn 2 only): gc_freeze_probe.py, the start-up heap frozen or not
# (appendix A5). Carry the flash-attn wheel; set NANOSERVE_GIT_COMMIT. $OUT gets gc_freeze_<tag>.json and the log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT=${OUT:-/tmp/gc_freeze}; mkdir -p "$OUT"
source scripts/gpu/flash2_env.sh
timeout 500 python3 scripts/gpu/gc_freeze_probe.py --out "$OUT" --tag "${GPU:-gpu}" >"$OUT/gc_freeze_probe.log" 2>&1
echo "gc freeze probe: exit $?"; tail -8 "$OUT/gc_freeze_probe.log"
echo "gc_freeze_call: ${SECONDS} s"
