#!/usr/bin/env bash
# Does the HTTP thread hold up the engine thread? nanoserve serve measured at two rates with Python's
# default GIL switch interval (5 ms) and with 0.5 ms, set through a sitecustomize.py on the server's path.
#   OUT=... bash scripts/gpu/serve_switch_interval.sh  (carry the flash-attn wheel, config.json, .gpu/servedeps)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/switch_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl
# the HTTP stack: from vLLM's install when this machine has it, else the few wheels carried in .gpu/servedeps
[ -d /tmp/vsite/uvicorn ] || python3 -m pip install -q --no-index --no-deps --target /tmp/vsite .gpu/servedeps/*.whl
HOOK=$(mktemp -d /tmp/switch_hook.XXXXXX)
cat >"$HOOK/sitecustomize.py" <<'PY'
import os, sys
if os.environ.get("SWITCH_INTERVAL_S"):
    sys.setswitchinterval(float(os.environ["SWITCH_INTERVAL_S"]))
PY
for interval in default 0.0005; do
  if [ "$interval" = default ]; then unset SWITCH_INTERVAL_S; else export SWITCH_INTERVAL_S=$interval; fi
  echo "== switch interval: $interval"
  # the engine on a thread, the question's subject (a GPU's default worker is now a process of its own)
  OUT="$OUT/$interval" ENGINES=nanoserve RATES=${RATES:-"32 inf"} PYTHONPATH="$HOOK" \
    NANOSERVE_ARGS=--no-engine-process \
    bash scripts/gpu/serve_bench.sh 2>&1 | tail -4
done
