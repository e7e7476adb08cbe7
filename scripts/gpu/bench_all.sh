#!/usr/bin/env bash
# nanoserve vs vLLM (and nano-vllm, transformers) on one GPU, back to back. Run ON THE GPU MACHINE from the repository root, after
# flash-attn is installed in /tmp/site and vLLM in /tmp/vsite (see ../shared/gpu/README.md).
#
#   bash scripts/gpu/bench_all.sh
#
# 1. builds a random-weight checkpoint with the exact Qwen3-0.6B config into $MODEL (tokenizer files
#    from .gpu/tokenizer/ when present: `python -m nanobench build-tokenizer .gpu/tokenizer` here);
# 2. runs each engine ONCE, in its own Python process, over all workloads (one engine instance each:
#    vLLM's start-up alone is 35-70 s), at least two timed runs per throughput workload;
# 3. bundles every per-run JSON into $OUT/results.json (split it at home with
#    `python -m nanobench unpack results.json`), keeps the log in $OUT/bench.log and prints a table.
# Budget: about 9 minutes in all; each engine process is stopped after its timeout (results of the
# workloads it finished are kept). Environment knobs below; extra engine flags via NANOSERVE_ARGS / VLLM_ARGS /
# NANO_VLLM_ARGS.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

OUT=${OUT:-/tmp/bench_out}
MODEL=${MODEL:-/tmp/qwen3-0.6b}
CONFIG=${CONFIG:-.gpu/config.json}
WORKLOADS=${WORKLOADS:-random,shared-prefix,latency}
RUNS=${RUNS:-2}
TAG=${TAG:-h200}
GPU_UTIL=${GPU_UTIL:-0.9}
ENGINES=${ENGINES:-nanoserve vllm}
NANOSERVE_TIMEOUT=${NANOSERVE_TIMEOUT:-270}
VLLM_TIMEOUT=${VLLM_TIMEOUT:-210}
NANO_VLLM_TIMEOUT=${NANO_VLLM_TIMEOUT:-150}
NANO_VLLM_PATH=${NANO_VLLM_PATH:-.gpu/nano-vllm}
NANO_VLLM_ARGS=${NANO_VLLM_ARGS:-}
TRANSFORMERS_TIMEOUT=${TRANSFORMERS_TIMEOUT:-150}
TRANSFORMERS_ARGS=${TRANSFORMERS_ARGS:---num-requests 32 --batch-size 32 --output-len 100,256 --runs 1 --latency-batches 1,8 --latency-reps 1}
NANOSERVE_ARGS=${NANOSERVE_ARGS:-}
VLLM_ARGS=${VLLM_ARGS:-}
FLASH_SITE=${FLASH_SITE:-/tmp/site}
VLLM_SITE=${VLLM_SITE:-/tmp/vsite}

mkdir -p "$OUT"
RUNDIR=$(mktemp -d /tmp/bench_runs.XXXXXX)
LOG="$OUT/bench.log"
SESSION=${SESSION:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}  # one session across calls: pass it to each
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
say() { echo "[bench_all $(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

say "session $SESSION; $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"

if ! PYTHONPATH="$FLASH_SITE:$PYTHONPATH" python3 -c "import flash_attn" 2>/dev/null; then
  if ls .gpu/flash_attn-*.whl >/dev/null 2>&1; then
    say "installing flash-attn into $FLASH_SITE"
    python3 -m pip install -q --no-index --no-deps --target "$FLASH_SITE" .gpu/flash_attn-*.whl >>"$LOG" 2>&1
  else
    say "WARNING: flash-attn is not installed and no wheel in .gpu/: nanoserve falls back to its torch backend"
  fi
fi

if [ ! -f "$MODEL/config.json" ]; then
  TOK=()
  [ -f .gpu/tokenizer/tokenizer.json ] && TOK=(--tokenizer-from .gpu/tokenizer)
  say "building random-weight checkpoint from $CONFIG into $MODEL"
  python3 -m nanobench build-model --config "$CONFIG" --out "$MODEL" "${TOK[@]}" >>"$LOG" 2>&1 \
    || { say "ERROR: could not build the checkpoint (see $LOG)"; tail -20 "$LOG"; exit 1; }
fi
[ -f "$MODEL/tokenizer.json" ] || say "no tokenizer files in $MODEL: both engines run with skip_tokenizer_init"

COMMON=(--workload "$WORKLOADS" --model "$MODEL" --out "$RUNDIR" --runs "$RUNS" --session "$SESSION"
        --tag "$TAG" --gpu-util "$GPU_UTIL" --weights-note "random weights, exact Qwen3-0.6B shapes")

for ENGINE in $ENGINES; do
  export NANOBENCH_LAUNCHED_AT=$(date +%s.%N)  # process start -> ready, read by nanobench once the engine is built
  case $ENGINE in
    nanoserve)
      say "nanoserve: start (timeout ${NANOSERVE_TIMEOUT}s)"
      # shellcheck disable=SC2086
      PYTHONPATH="$FLASH_SITE:$PYTHONPATH" timeout -k 10 "$NANOSERVE_TIMEOUT" \
        python3 -m nanobench --engine nanoserve "${COMMON[@]}" --timeline --measure-gpu $NANOSERVE_ARGS \
        >>"$LOG" 2>&1
      ;;
    vllm)
      if [ ! -d "$VLLM_SITE/vllm" ]; then say "vLLM is not installed in $VLLM_SITE: skipped"; continue; fi
      say "vllm: start (timeout ${VLLM_TIMEOUT}s)"
      # shellcheck disable=SC2086
      PYTHONPATH="$VLLM_SITE:$PYTHONPATH" VLLM_USE_FLASHINFER_SAMPLER=0 timeout -k 10 "$VLLM_TIMEOUT" \
        python3 -m nanobench --engine vllm "${COMMON[@]}" $VLLM_ARGS >>"$LOG" 2>&1
      ;;
    nano-vllm)
      if [ ! -f "$NANO_VLLM_PATH/nanovllm/__init__.py" ]; then say "no nano-vllm checkout in $NANO_VLLM_PATH: skipped"; continue; fi
      say "nano-vllm: start (timeout ${NANO_VLLM_TIMEOUT}s, commit $(cat "$NANO_VLLM_PATH/COMMIT" 2>/dev/null))"
      PYTHONPATH="$FLASH_SITE:$PYTHONPATH" timeout -k 10 "$NANO_VLLM_TIMEOUT" \
        python3 -m nanobench --engine nano-vllm --nano-vllm-path "$NANO_VLLM_PATH" "${COMMON[@]}" $NANO_VLLM_ARGS >>"$LOG" 2>&1
      ;;
    transformers)
      say "transformers: start (timeout ${TRANSFORMERS_TIMEOUT}s; $TRANSFORMERS_ARGS)"
      # shellcheck disable=SC2086
      timeout -k 10 "$TRANSFORMERS_TIMEOUT" python3 -m nanobench --engine transformers "${COMMON[@]}" \
        $TRANSFORMERS_ARGS >>"$LOG" 2>&1
      ;;
    *) say "unknown engine $ENGINE: skipped"; continue ;;
  esac
  rc=$?
  say "$ENGINE: exit $rc"
  grep -h '^\[bench\]' "$LOG" | tail -4
done

# what vLLM says it ran (attention backend, compilation, CUDA graphs, KV cache size), for the audit in chapter 15
grep -hE "attention backend|FlashAttention version|Graph capturing finished|Model loading took|torch.compile|compil|KV cache size|Maximum concurrency|max_num_seqs|max_num_batched_tokens|chunked prefill" "$LOG" \
  | grep -E '\[[a-z_0-9]+\.py:[0-9]+\]' | sort -u | head -60 > "$OUT/vllm_said.txt" 2>/dev/null || true
n=$(ls "$RUNDIR"/*.json 2>/dev/null | wc -l)
if [ "$n" -gt 0 ]; then
  python3 -m nanobench bundle "$RUNDIR" --out "$OUT/results.json" | tee -a "$LOG"
  echo
  python3 -m nanobench summary "$RUNDIR" | tee -a "$LOG"
else
  say "no results were written; the last lines of the log:"
  tail -40 "$LOG"
  exit 1
fi
