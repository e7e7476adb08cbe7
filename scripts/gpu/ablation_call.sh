#!/usr/bin/env bash
# One H200 call of the ablation (scripts/gpu/ablation.py): installs flash-attn (the kit's wheel, carried in .gpu/),
# builds the random-weight Qwen3-0.6B checkpoint once per warm machine, runs the configurations asked for, and
# leaves the JSON in $OUT.
#
#   CONFIGS=ladder OUT=$OUT bash scripts/gpu/ablation_call.sh      (then CONFIGS=loo in the next call)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/ablation_out}; mkdir -p "$OUT"
MODEL=/root/stash/qwen3-0.6b-random; mkdir -p /root/stash
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
[ -f "$MODEL/config.json" ] || python3 -m nanobench build-model --config qwen3-0.6b --out "$MODEL" >"$OUT/build.log" 2>&1 \
  || { tail -5 "$OUT/build.log"; exit 1; }
timeout -k 10 "${LIMIT:-570}" python3 scripts/gpu/ablation.py --model "$MODEL" --out "$OUT" --configs "${CONFIGS:-ladder}" \
  --runs "${RUNS:-5}" --budget-s "${BUDGET:-110}" 2>"$OUT/stderr.log"
echo "ablation_call: exit $? after ${SECONDS} s"
