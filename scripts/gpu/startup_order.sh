#!/usr/bin/env bash
# A start before and after a change: startup_profile.py on a random Qwen3-0.6B, flash-attn 2 alone, warm kernel
# caches, in fresh processes that alternate between the tree before the change (BEFORE, a copy of its `nanoserve/`
# made with `git archive COMMIT nanoserve`, its commit in BEFORE/COMMIT) and this tree, three times each, then this
# tree without a tokenizer twice; every start's profile in $OUT/startup_order.json. Carry BEFORE, the flash-attn
# wheel, .gpu/wheels, .gpu/tokenizer. The labels name the two trees: BEFORE_LABEL (default "thread": the
# tokenizer beside the core, 2026-12-05) and AFTER_LABEL (default "in-order": the tokenizer before it). REPS sets
# the pairs (3); TOKENIZER_FIRST=1 adds a third arm, this tree with the tokenizer loaded before the core
# (startup_profile.py --tokenizer-first); COLD=N adds N starts of this tree, each on its own empty kernel caches (the
# first start, warm-up-the-caches, is on empty ones too: on a fresh machine, its first process). SITE (default
# /tmp/site, flash-attn 2 alone) is the path the packages come from; with flash-attn-4 on it, the script waits after
# the first start for the background compile that start began, so the later starts take flash-attn-4, and FA2_REF=N
# adds N starts with /tmp/site alone (NO_TOKENIZER=N sets the starts without a tokenizer, 2). It runs on a CPU too: MODEL=<a checkpoint> PYTHON=<an interpreter with
# nanoserve's dependencies> (nothing is installed where there is no nvidia-smi).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/startup_order}; mkdir -p "$OUT"; BEFORE_GIVEN=${BEFORE:-.gpu/before}; BEFORE=$(realpath "$BEFORE_GIVEN")
command -v nvidia-smi >/dev/null &&  # on a GPU machine: flash-attn 2 and the kit's wheels
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl >"$OUT/install.log" 2>&1
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/so_xdg TRITON_CACHE_DIR=/tmp/so_triton
PYTHON=${PYTHON:-python3}; SITE=${SITE:-/tmp/site}
MODEL=${MODEL:-$(PYTHONPATH=/tmp/site:$PWD $PYTHON -c "import sys; sys.path.insert(0, 'scripts/gpu'); from probe_timing import random_qwen3_0_6b as m; print(m())" \
  2>"$OUT/build.log" | tail -1)}
run() {  # run LABEL TREE [startup_profile.py options]: one fresh process importing nanoserve from TREE
  local label=$1 tree=$2; shift 2
  NANOBENCH_LAUNCHED_AT=$(date +%s.%N) PYTHONPATH=${RUN_SITE:-$SITE}:$tree timeout 120 $PYTHON scripts/gpu/startup_profile.py \
    --model "$MODEL" --label "$label" --out "/tmp/so_runs/$label.json" "$@" 2>&1 | grep '^\[startup\]' | head -1
}
rm -rf /tmp/so_runs /tmp/so_xdg /tmp/so_triton /tmp/so_cold; mkdir -p /tmp/so_runs
run warm-up-the-caches "$PWD"  # on empty kernel caches: on a fresh machine, its first start
if PYTHONPATH=$SITE $PYTHON -c "import importlib.metadata as m; m.version('flash-attn-4')" 2>/dev/null; then
  sleep 2  # the background compile takes its lock just after it starts
  PYTHONPATH=$SITE:$PWD timeout 300 $PYTHON -c "from nanoserve.engine.flash4_compile import wait_for_compile as w; w()" \
    || echo "startup_order: the wait for the flash-attn-4 compile failed ($?)"
fi
for rep in $(seq "${REPS:-3}"); do
  run "${BEFORE_LABEL:-thread}-$rep" "$BEFORE"; run "${AFTER_LABEL:-in-order}-$rep" "$PWD"
  [[ ${TOKENIZER_FIRST:-0} == 1 ]] && run "tokenizer-first-$rep" "$PWD" --tokenizer-first  # a third arm
done
for rep in $(seq "${NO_TOKENIZER:-2}"); do run "no-tokenizer-$rep" "$PWD" --engine-arg skip_tokenizer_init=true; done
for rep in $(seq "${FA2_REF:-0}"); do RUN_SITE=/tmp/site run "flash-attn-2-only-$rep" "$PWD"; done
for rep in $(seq "${COLD:-0}"); do  # COLD=N: N more starts of this tree, each on its own empty kernel caches
  XDG_CACHE_HOME=/tmp/so_cold/$rep/xdg TRITON_CACHE_DIR=/tmp/so_cold/$rep/triton run "cold-$rep" "$PWD"
done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); MACHINE="${GPU:-CPU only}, $(nproc) cores"
COMMAND="SITE=$SITE FA2_REF=${FA2_REF:-0} NO_TOKENIZER=${NO_TOKENIZER:-2} MODEL=$MODEL BEFORE=$BEFORE_GIVEN BEFORE_LABEL=${BEFORE_LABEL:-thread} AFTER_LABEL=${AFTER_LABEL:-in-order} TOKENIZER_FIRST=${TOKENIZER_FIRST:-0} REPS=${REPS:-3} COLD=${COLD:-0} bash scripts/gpu/startup_order.sh"
$PYTHON - "$OUT" "$(cat "$BEFORE/COMMIT")" "$MACHINE" "$COMMAND" "${NANOSERVE_GIT_COMMIT:-$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)}" \
  <<'PY' | tee "$OUT/summary.txt"
import datetime, json, platform, statistics, sys
from pathlib import Path
out, before, machine, command, after = Path(sys.argv[1]), *sys.argv[2:]
runs = [json.loads(p.read_text()) for p in sorted(Path("/tmp/so_runs").glob("*.json"), key=lambda p: p.stat().st_mtime)]
runs.sort(key=lambda r: r["label"] != "warm-up-the-caches")  # first, as readers expect, or absent if it failed
provenance = {"machine": machine, "python": platform.python_version(), "torch": runs[0].get("torch") if runs else None,
              "command": command,
              "before": before, "after": after, "date": datetime.date.today().isoformat()}
(out / "startup_order.json").write_text(json.dumps({"before": before, "runs": runs, "provenance": provenance}, indent=1))
print(f"the tree before ({before}) and this tree, alternating; seconds")
print(f"{'start':22} {'ready':>6} {'ctor':>6} {'core':>6} {'tokenizer':>9} {'capture':>8} {'profile':>8}  backend "
      "dynamo tokens")
tokens = {tuple(r.get("greedy_tokens") or ()) for r in runs if r.get("backend") == "flash4"}
groups = {}
for d in runs:  # the first start (empty caches) printed too, kept out of the medians
    ph = d["phases"]
    get = lambda k: ph.get(k, {}).get("s", 0.0)
    row = (d["process_ready_s"], d["constructor_s"], get("engine core (runner, KV cache, graphs)"),
           get("tokenizer (load_engine_tokenizer)"), get("graph capture (all)"), get("profile run (KV sizing)"))
    if d["label"] != "warm-up-the-caches":
        groups.setdefault(d["label"].rsplit("-", 1)[0], []).append(row)
    print(f"{d['label']:22} " + " ".join(f"{v:6.2f}" for v in row[:3]) + f" {row[3]:9.2f} {row[4]:8.2f} {row[5]:8.2f}  "
          f"{d.get('backend')} {d.get('torch_dynamo_imported')} {(d.get('greedy_tokens') or [])[:4]}")
print(f"flash-attn-4 starts: {len(tokens)} distinct greedy outputs (one means every tree decoded alike)")
for name, rows in groups.items():
    print(f"median {name:>13}: ready {statistics.median(r[0] for r in rows):.2f} s, constructor "
          f"{statistics.median(r[1] for r in rows):.2f} s")
PY
echo "startup_order: ${SECONDS} s"
