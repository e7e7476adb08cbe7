#!/usr/bin/env bash
# nanoserve served at saturation: the package before a change (BEFORE, `git archive <commit> nanoserve` unpacked)
# against this checkout's, alternating, ROUNDS times, each a fresh server measured by vLLM's client
# (serve_vllm_client.sh with ENGINES=nanoserve, RATES runs per server; flash-attn 2 unless flash-attn-4 is stashed).
# Run ON THE GPU MACHINE after the vLLM pack's stash calls (spec_call.sh stash spec/NN{a,b}), carrying what
# serve_vllm_client.sh needs plus BEFORE:
#
#   BEFORE=.gpu/before_serve OUT=/tmp/serve_ab bash scripts/gpu/serve_ab.sh
#
# Writes $OUT/<arm>-<round>/ (serve_vllm_client.sh's files) and $OUT/ab_summary.md, the table printed last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/serve_ab}; BEFORE=${BEFORE:-.gpu/before_serve}; ROUNDS=${ROUNDS:-2}; RATES=${RATES:-"inf inf"}
[ -d "$BEFORE/nanoserve" ] || { echo "no nanoserve package in $BEFORE"; exit 1; }
for round in $(seq "$ROUNDS"); do
  for arm in before after; do
    tree=""; [ "$arm" = before ] && tree="$PWD/$BEFORE"
    OUT="$OUT/$arm-$round" NANOSERVE_TREE="$tree" ENGINES=nanoserve RATES="$RATES" NANOBENCH_RATE="" \
      bash scripts/gpu/serve_vllm_client.sh 2>&1 | grep "| nanoserve" | sed "s/^/$arm $round /"
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/ab_summary.md"
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
print("| arm | run | rate | out tok/s | TTFT median ms | TPOT median ms |\n|---|---|---|---|---|---|")
tok = {}
for d in sorted(out.glob("*-*/vllm_client")):
    arm = d.parent.name.split("-")[0]
    for f in sorted(d.glob("*.json")):
        r = json.loads(f.read_text())
        tok.setdefault((arm, f.stem.split("-rate")[1].split("-")[0]), []).append(r["output_throughput"])
        print(f"| {arm} | {d.parent.name}/{f.stem} | {r['request_rate']} | {r['output_throughput']:.0f} | "
              f"{r['median_ttft_ms']:.1f} | {r['median_tpot_ms']:.2f} |")
for (arm, rate), xs in sorted(tok.items()):
    print(f"\n{arm}, rate {rate}: median {statistics.median(xs):.0f} tok/s over {len(xs)} runs ({min(xs):.0f}-{max(xs):.0f})")
PY
