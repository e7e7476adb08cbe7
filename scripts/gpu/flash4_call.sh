#!/usr/bin/env bash
# Chapter 19's H200 session: flash-attn-4 beside flash-attn 2 (no network there). flash-attn-4 and the CUTLASS DSL
# travel in five parts (about 22 MB each, since a call carries the working tree too), one call each, right after
# one another (/root/stash lasts while the machine stays warm). Made on the CPU machine from the kit's download:
#   bash ../shared/gpu/fa4/fetch.sh .gpu/fa4, then join its cu13 parts, `split -n 4 -d -a 1` the wheel into .gpu/fa4s/p0..p3
#   (each part beside a 35 MiB checkout stays under a call's 64 MiB) and put the small wheels, cu13.name and
#   cu13.sha256 into .gpu/fa4s/c2.
#   bash scripts/gpu/flash4_call.sh stash X   carrying .gpu/fa4s/X, for X = p0, p1, p2, p3, c2
#   bash scripts/gpu/flash4_call.sh bench     carrying the flash-attn wheel and .gpu/wheels: installs (once per
#                                             machine), records chapter 19's GPU cells, then the ablation's flash4
#                                             group (flash-attn 2, then flash-attn-4 with a cold and a warm cache)
#   bash scripts/gpu/flash4_call.sh test      the same carry; the GPU suite with flash-attn-4 on the path ('auto'
#                                             picks it), then without it (flash-attn 2); TEST_SITES=ONLY_FA2 runs the
#                                             second alone and needs nothing stashed
#   bash scripts/gpu/flash4_call.sh start     the same carry plus .gpu/tokenizer and BEFORE (default
#                                             .gpu/before_import, `git archive COMMIT nanoserve` with COMMIT in it):
#                                             flash-attn-4's import alone (flash4_import_probe.py), then starts of the
#                                             tree before and this tree in turn with flash-attn-4 on the path
#                                             (startup_order.sh; its first start, on empty caches, is a fresh
#                                             machine's first process when this is the first run call), and two
#                                             starts on flash-attn 2 alone
#   bash scripts/gpu/flash4_call.sh split     the bench carry plus .gpu/tokenizer: chapter 10's split `o` and `down`
#                                             against one GEMM each, on flash-attn-4 (split_engine_probe.py), then
#                                             `test` (TEST_SITES as there)
# Set NANOSERVE_GIT_COMMIT to this checkout's commit in the command: the device copy's .git can be older than its
# files, and the results' provenance reads it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
S=/root/stash/fa4; mkdir -p "$S"
if [[ "$1" == stash ]]; then cp .gpu/fa4s/"$2"/* "$S/" && ls "$S" | tr '\n' ' '; echo; exit 0; fi
OUT=${OUT:-/tmp/flash4_out}; mkdir -p "$OUT"
if [[ ${TEST_SITES:-} == ONLY_FA2 ]]; then  # flash-attn 2 alone: nothing stashed is needed
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
  WITH_FA4=/tmp/site
else
  source scripts/gpu/install_flash4.sh || exit 1
fi
ONLY_FA2=/tmp/site:$PWD
FA4_SITE=$WITH_FA4  # the packages alone, without this tree
WITH_FA4=$WITH_FA4:$PWD
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PYTHONPATH=$WITH_FA4 python3 -c "from nanoserve.engine.selector import attention_backends as a; print('auto picks:', next(iter(a())))"
if [[ "$1" == bench ]]; then
  [[ ${CELLS:-1} == 1 ]] && PYTHONPATH=$WITH_FA4 timeout 200 python3 scripts/gpu/run_gpu_cells.py chapters/19_hopper_attention.ipynb \
    --out "$OUT" >"$OUT/cells.log" 2>&1; echo "chapter 19 cells: exit $?"; grep -E "Error|Traceback" "$OUT/cells.log" | head
  MODEL=/root/stash/qwen3-0.6b-random
  [ -f "$MODEL/config.json" ] || PYTHONPATH=$ONLY_FA2 python3 -m nanobench build-model --config qwen3-0.6b \
    --out "$MODEL" >"$OUT/build.log" 2>&1 || { tail -5 "$OUT/build.log"; exit 1; }
  export XDG_CACHE_HOME=$(mktemp -d)  # an empty kernel cache: the first flash4 configuration compiles
  PYTHONPATH=$WITH_FA4 timeout -k 10 "${LIMIT:-330}" python3 scripts/gpu/ablation.py --model "$MODEL" --out "$OUT" \
    --configs "${CONFIGS:-flash4}" --runs "${RUNS:-5}" --budget-s "${BUDGET:-90}" 2>"$OUT/ablation_stderr.log"
  echo "ablation: exit $?"; du -sh "$XDG_CACHE_HOME"/nanoserve/flash4 2>/dev/null
elif [[ "$1" == start ]]; then
  PYTHONPATH=$WITH_FA4 timeout 200 python3 scripts/gpu/flash4_import_probe.py "$OUT/flash4_import.json" "${REPS:-3}" \
    2>&1 | tail -4
  SITE=$FA4_SITE BEFORE=${BEFORE:-.gpu/before_import} BEFORE_LABEL=${BEFORE_LABEL:-library-import} \
    AFTER_LABEL=${AFTER_LABEL:-marks-skipped} FA2_REF=${FA2_REF:-2} NO_TOKENIZER=0 OUT=$OUT \
    timeout "${LIMIT:-420}" bash scripts/gpu/startup_order.sh 2>&1 | tail -22
elif [[ "$1" == split ]]; then
  PYTHONPATH=$WITH_FA4:$PWD/scripts/gpu timeout "${PROBE_LIMIT:-240}" python3 scripts/gpu/split_engine_probe.py \
    "$OUT/split_engine_flash4.json" 2>&1 | grep -v -i "warn" | tee "$OUT/split_engine.log" | tail -12
fi
if [[ "$1" == test || "$1" == split ]]; then
  nvidia-smi -L  # the suites' logs do not name the card
  for site in ${TEST_SITES:-WITH_FA4 ONLY_FA2}; do
    echo "== GPU suite, $site"
    PYTHONPATH=${!site} timeout "${TEST_LIMIT:-260}" python3 -m pytest -q -p no:cacheprovider tests/gpu \
      ${TESTS_K:+-k "$TESTS_K"} >"$OUT/tests_$site.log" 2>&1; echo "exit $?"
    sed -n '/attention backend/p' "$OUT/tests_$site.log"; tail -4 "$OUT/tests_$site.log"
  done
fi
echo "flash4_call $1: ${SECONDS} s"
