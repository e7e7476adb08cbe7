#!/usr/bin/env bash
# Where a start's seconds go, by experiment (flash-attn 2 alone, no stash needed): startup_profile.py on a random
# Qwen3-0.6B, first on empty kernel caches, then warm, twice each: the engine as it is, without the tokenizer thread
# (skip_tokenizer_init), with capture's warm-up run before the first graph only, without cascade's graphs, and with
# no graphs at all (enforce_eager), and with Triton and flash-attn imported (and timed) before LLM(). Carry the flash-attn wheel, .gpu/wheels and .gpu/tokenizer. Results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/startup_variants}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl >"$OUT/install.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/sv_xdg TRITON_CACHE_DIR=/tmp/sv_triton
MODEL=$(python3 -c "import sys; sys.path.insert(0, 'scripts/gpu'); from probe_timing import random_qwen3_0_6b as m; print(m())" \
  2>"$OUT/build.log" | tail -1)
rm -rf /tmp/sv_xdg /tmp/sv_triton
run() {  # run LABEL [startup_profile.py options]: one fresh process
  local label=$1; shift
  NANOBENCH_LAUNCHED_AT=$(date +%s.%N) timeout 120 python3 scripts/gpu/startup_profile.py --model "$MODEL" \
    --label "$label" --out "$OUT/$label.json" "$@" 2>&1 | grep '^\[startup\]' >"$OUT/$label.txt"; head -1 "$OUT/$label.txt"
}
run cold
for rep in 1 2; do
  run "default-$rep"
  run "no-tokenizer-$rep" --engine-arg skip_tokenizer_init=true
  run "warm-up-first-$rep" --warm-up first
  run "no-cascade-$rep" --engine-arg disable_cascade_attn=true
  run "eager-$rep" --engine-arg enforce_eager=true
  run "pre-imported-$rep" --pre-import triton,flash_attn.flash_attn_interface
done
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
rows = sorted(Path(sys.argv[1]).glob("*.json"), key=lambda p: p.stat().st_mtime)
keys = ["engine core (runner, KV cache, graphs)", "profile run (KV sizing)", "graph capture (all)",
        "load_weights (checkpoint -> GPU)", "eager forwards (profile run, warm-ups)", "eager sampler calls",
        "tokenizer (load_engine_tokenizer)"]
print(f"{'start':18} {'ready':>6} {'torch':>6} {'pre':>5} {'ctor':>6} " + " ".join(f"{k.split(' (')[0][:12]:>12}" for k in keys))
for p in rows:
    d = json.loads(p.read_text())
    ph = d["phases"]
    print(f"{d['label']:18} {d['process_ready_s']:6.2f} {d['import_torch_s']:6.2f} {sum(d['pre_imports_s'].values()):5.2f} {d['constructor_s']:6.2f} "
          + " ".join(f"{ph.get(k, {}).get('s', 0):12.2f}" for k in keys))
PY
echo "startup_variants: ${SECONDS} s"
