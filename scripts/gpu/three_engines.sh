#!/usr/bin/env bash
# nanoserve (its default attention: flash-attn-4 on Hopper), vLLM 0.24.0 and nano-vllm on every workload, back to
# back on one warm GPU, in two calls (each engine process has its own timeout; a call may run 10 minutes).
# Run ON THE GPU MACHINE from the repository root after the stash calls, one right after another:
#   bash scripts/gpu/spec_call.sh stash spec/NN    (NN = 00..14, carrying .gpu/spec/NN: vLLM and its deps, 24 MiB each)
#   bash scripts/gpu/flash4_call.sh stash X        (X = p0 p1 p2 p3 c2, carrying .gpu/fa4s/X: flash-attn-4)
# then, carrying .gpu/spec/SHA256, the flash-attn wheel, .gpu/wheels (xxhash for nano-vllm),
# .gpu/tokenizer (`python -m nanobench build-tokenizer .gpu/tokenizer`) and .gpu/nano-vllm (`git archive HEAD` of
# GeeeekExplorer/nano-vllm, its commit in nano-vllm/COMMIT):
#   PART=a OUT=$OUT bash scripts/gpu/three_engines.sh   nanoserve on empty kernel caches (a machine's first start,
#                                                       latency only: flash-attn 2 while flash-attn-4 compiles in the
#                                                       background), then, once that compile is done, every workload
#                                                       in a second nanoserve process (flash-attn-4), then nano-vllm;
#                                                       between the two, scripts/gpu/startup_profile.py times the
#                                                       phases of a first start and a warm one (flash-attn 2)
#   PART=b OUT=$OUT bash scripts/gpu/three_engines.sh   vLLM with its defaults (FlashAttention 3), then vLLM with
#                                                       flash-attn 2 on the long-prompt workload (FA2=0 skips it)
# Pass one SESSION=<UTC timestamp> to both parts: each bench_all.sh call otherwise starts a session of its own, and the
# harness's helpers (nanobench.results) pair engines only within one session.
# Each part leaves one bundle of every engine's results, $OUT/three_engines_<part>.json (`python -m nanobench
# unpack`), and one log, $OUT/three_engines_<part>.log (the device returns at most eight files), and prints its table
# last; the per-engine folders move to /tmp/three_engines_runs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT=${OUT:-/tmp/three_out}; mkdir -p "$OUT"
START=$(date +%s)
bash scripts/gpu/install_spec_pack.sh >"$OUT/install.log" 2>&1 || echo "vLLM install failed: vLLM is skipped"
source scripts/gpu/install_flash4.sh >>"$OUT/install.log" 2>&1 || { echo "flash-attn-4 install failed"; WITH_FA4=/tmp/site; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl >>"$OUT/install.log" 2>&1
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 FLASH_SITE=$WITH_FA4 MODEL=/tmp/qwen3-0.6b CONFIG=qwen3-0.6b
export WORKLOADS=${WORKLOADS:-random,shared-prefix,high-churn,prefill-bound,latency} RUNS=${RUNS:-3} TAG=${TAG:-h200}
echo "installs: $(( $(date +%s) - START )) s; nanoserve ${NANOSERVE_GIT_COMMIT:-(commit not stated)}"
bench() {  # bench NAME ENGINES [VAR=VALUE ...]: one bench_all.sh run into $OUT/NAME
  local name=$1 engines=$2; shift 2
  env "$@" OUT="$OUT/$name" ENGINES="$engines" bash scripts/gpu/bench_all.sh >"$OUT/$name.out" 2>&1
  echo "== $name: exit $?"; grep -v '^\[bench_all' "$OUT/$name.out" | grep -v '^\[bench\]' | tail -14
}
if [[ ${PART:-a} == a ]]; then
  export XDG_CACHE_HOME=/root/stash/xdg TRITON_CACHE_DIR=/root/stash/triton  # empty on a fresh machine: a cold start
  rm -rf "$XDG_CACHE_HOME" "$TRITON_CACHE_DIR"
  bench cold nanoserve WORKLOADS=latency NANOSERVE_TIMEOUT=90  # a machine's first start: flash-attn 2 at once
  # its background process compiles flash-attn-4's kernels (appendix A5); the workloads run on them, as every later start
  PYTHONPATH=$PWD:$FLASH_SITE python3 -c "from nanoserve.engine.flash4_compile import wait_for_compile as w; w()"
  echo "background compile done: $(( $(date +%s) - START )) s"
  # where a first start's seconds go: flash-attn 2 alone (no background compile), its own empty caches, then warm
  rm -rf /tmp/profile_xdg /tmp/profile_triton
  for pass in cold warm; do
    NANOBENCH_LAUNCHED_AT=$(date +%s.%N) XDG_CACHE_HOME=/tmp/profile_xdg TRITON_CACHE_DIR=/tmp/profile_triton \
      PYTHONPATH=/tmp/site:$PWD timeout 120 python3 scripts/gpu/startup_profile.py --model "$MODEL" --label "$pass" \
      --out "/tmp/startup_$pass.json" 2>&1 | grep '^\[startup\]' | tee -a "$OUT/startup.out"
  done
  bench warm nanoserve NANOSERVE_TIMEOUT=${NANOSERVE_TIMEOUT:-200}
  [[ ${NANO_VLLM:-1} == 1 ]] && bench nano-vllm nano-vllm NANO_VLLM_TIMEOUT=${NANO_VLLM_TIMEOUT:-200} NANO_VLLM_ARGS=--timeline  # 0: nanoserve alone
else
  bench vllm vllm VLLM_TIMEOUT=${VLLM_TIMEOUT:-300} VLLM_ARGS=--timeline  # per-step times, as nanoserve records
  # vLLM 0.24 ignores VLLM_FLASH_ATTN_VERSION: the version is an engine option
  [[ ${FA2:-1} == 1 ]] && bench vllm-fa2 vllm WORKLOADS=prefill-bound,random TAG=h200-vllm-fa2 VLLM_TIMEOUT=200 \
    VLLM_ARGS='--engine-arg attention_config={"flash_attn_version":2}'
  grep -h "FlashAttention version\|attention backend" "$OUT"/vllm*/bench.log | sort -u | cut -c1-200
fi
part=three_engines_${PART:-a}
python3 -m nanobench bundle "$OUT"/*/results.json --out "$OUT/$part.json"
for f in "$OUT"/install.log "$OUT"/*.out "$OUT"/*/*.log; do [[ -f $f ]] && { echo "##### $f"; cat "$f"; }; done \
  >"/tmp/$part.log" 2>/dev/null
mkdir -p /tmp/three_engines_runs && mv "$OUT"/* /tmp/three_engines_runs/ && mv "/tmp/three_engines_runs/$part.json" \
  "/tmp/$part.log" "$OUT/"
echo "three_engines part ${PART:-a}: ${SECONDS} s"
