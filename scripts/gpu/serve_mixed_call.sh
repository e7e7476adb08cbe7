#!/usr/bin/env bash
# One H200 call (issue 36): `nanoserve serve` with mixed-step graphs on (cudagraph_mode FULL, the default) and off
# (FULL_DECODE_ONLY: prefill and mixed steps run eagerly, as before chapter 12), measured by the same client
# (python -m nanobench serve) at the same rates, alternating the two servers REPEATS times. flash-attn 2 only.
#
#   bash scripts/gpu/serve_mixed_call.sh   carrying the flash-attn wheel, .gpu/wheels and .gpu/http (the server's
#                                          HTTP packages for Python 3.12: `pip download --no-deps` of fastapi,
#                                          uvicorn, pydantic, prometheus-client, httpx and what they need)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/serve_mixed_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl .gpu/http/*.whl \
  >"$OUT/install.log" 2>&1 || { tail -5 "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
MODEL=/root/stash/qwen3-0.6b-random
[ -f "$MODEL/config.json" ] || python3 -m nanobench build-model --config qwen3-0.6b --out "$MODEL" >"$OUT/build.log" 2>&1 \
  || { tail -5 "$OUT/build.log"; exit 1; }
for rep in $(seq 1 "${REPEATS:-2}"); do
  for mode in FULL FULL_DECODE_ONLY; do
    OUT="$OUT/$mode-$rep" MODEL=$MODEL ENGINES=nanoserve RATES="${RATES:-8 32 inf}" NUM_PROMPTS="${NUM_PROMPTS:-200}" \
      NANOSERVE_ARGS="--compilation-config {\"cudagraph_mode\":\"$mode\"}" FLASH_SITE=/tmp/site \
      bash scripts/gpu/serve_bench.sh >/dev/null 2>&1
    echo "== $mode, repeat $rep"; cat "$OUT/$mode-$rep/summary.md" 2>/dev/null || tail -5 "$OUT/$mode-$rep/serve_bench.log"
  done
done
echo "serve_mixed_call: ${SECONDS} s"
