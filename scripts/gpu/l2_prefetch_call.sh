#!/usr/bin/env bash
# Weights prefetched into L2 at small batch (l2_prefetch_probe.py), on one GPU: flash-attn-4 beside flash-attn 2 when
# `flash4_call.sh stash a|b|c` ran just before, else flash-attn 2 alone. Carry the flash-attn wheel, .gpu/wheels and
# .gpu/tokenizer. Results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/l2_prefetch_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [[ -f /root/stash/fa4/cu13.name ]]; then
  source scripts/gpu/install_flash4.sh >"$OUT/install.log" 2>&1 || { tail -5 "$OUT/install.log"; exit 1; }
  SITE=$WITH_FA4
else
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
  SITE=/tmp/site
fi
export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
timeout "${LIMIT:-500}" python3 scripts/gpu/l2_prefetch_probe.py "$OUT/l2_prefetch.json" 2>&1 | grep -v -i "warn" \
  | tee "$OUT/probe.log" | tail -45
echo "l2_prefetch_call: ${SECONDS} s"
