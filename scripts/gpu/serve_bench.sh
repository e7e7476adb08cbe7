#!/usr/bin/env bash
# Online serving benchmark on one GPU: `nanoserve serve`, then `vllm serve`, both measured by the same
# client (python -m nanobench.serve, = `python -m nanobench serve`) at the same request rates.
# Run ON THE GPU MACHINE from the repository root, after vLLM is installed in /tmp/vsite and flash-attn
# in /tmp/site (see scripts/gpu/final_bench.sh and ../shared/gpu/README.md):
#
#   OUT=/tmp/serve_out bash scripts/gpu/serve_bench.sh
#
# Writes into $OUT: serve_results.json (every per-run JSON, bundled), summary.md (the table printed last),
# serve_bench.log, nanoserve_server.log, vllm_server.log. Budget: about 6 minutes (vLLM's start-up is ~100 s);
# every step has a timeout, and each server is stopped (its whole process group) before the next starts.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

OUT=${OUT:-/tmp/serve_bench_out}
MODEL=${MODEL:-/tmp/qwen3-0.6b}
CONFIG=${CONFIG:-.gpu/config.json}
NAME=${NAME:-qwen3}
RATES=${RATES:-"8 32 inf"}
NUM_PROMPTS=${NUM_PROMPTS:-100}
INPUT_LEN=${INPUT_LEN:-512}
OUTPUT_LEN=${OUTPUT_LEN:-128}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-2048}
GPU_UTIL=${GPU_UTIL:-0.8}
GOODPUT=${GOODPUT:-"ttft:500 tpot:50"}
ENGINES=${ENGINES:-"nanoserve vllm"}
NANO_PORT=${NANO_PORT:-8011}
VLLM_PORT=${VLLM_PORT:-8012}
NANO_START_TIMEOUT=${NANO_START_TIMEOUT:-180}
VLLM_START_TIMEOUT=${VLLM_START_TIMEOUT:-240}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}
FLASH_SITE=${FLASH_SITE:-/tmp/site}
VLLM_SITE=${VLLM_SITE:-/tmp/vsite}
NANOSERVE_ARGS=${NANOSERVE_ARGS:-}
VLLM_ARGS=${VLLM_ARGS:-}

mkdir -p "$OUT"
RUNDIR=$(mktemp -d /tmp/serve_runs.XXXXXX)
SHIM=$(mktemp -d /tmp/serve_shim.XXXXXX)  # only the HTTP packages borrowed from vLLM's site, never its torch
LOG="$OUT/serve_bench.log"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
say() { echo "[serve_bench $(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
SERVER_PID=""

source scripts/gpu/server_helpers.sh  # (from the repository root) stop_server (trapped on exit), wait_healthy
run_rates() {  # LABEL PORT: the same client, the same prompts, every rate
  for rate in $RATES; do
    say "$1: request rate $rate, $NUM_PROMPTS prompts of $INPUT_LEN tokens -> $OUTPUT_LEN tokens"
    # shellcheck disable=SC2086
    timeout -k 5 "$BENCH_TIMEOUT" python3 -m nanobench.serve --base-url "http://127.0.0.1:$2" --model "$NAME" \
      --request-rate "$rate" --num-prompts "$NUM_PROMPTS" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" \
      --goodput $GOODPUT --label "$1" --out "$RUNDIR" --result-file "$1-rate$rate.json" >>"$LOG" 2>&1 \
      || say "$1 at rate $rate: exit $? (see $LOG)"
  done
}

say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
for mod in fastapi starlette uvicorn h11 httptools pydantic pydantic_core annotated_types typing_inspection \
           anyio sniffio httpx httpcore idna certifi click; do  # borrow only what the system python lacks
  if ! python3 -c "import $mod" 2>/dev/null && [ -e "$VLLM_SITE/$mod" ]; then ln -s "$VLLM_SITE/$mod" "$SHIM/$mod"; fi
done
for mod in fastapi uvicorn httpx; do
  PYTHONPATH="$SHIM:$PYTHONPATH" python3 -c "import $mod" 2>>"$LOG" || say "WARNING: cannot import $mod"
done

if [ ! -f "$MODEL/config.json" ]; then
  say "building a random-weight checkpoint from $CONFIG into $MODEL"
  timeout 300 python3 -m nanobench build-model --config "$CONFIG" --out "$MODEL" >>"$LOG" 2>&1 \
    || { say "ERROR: could not build the checkpoint"; tail -20 "$LOG"; exit 1; }
fi
SKIP=()
[ -f "$MODEL/tokenizer.json" ] || { SKIP=(--skip-tokenizer-init); say "no tokenizer files: both servers run on token ids"; }

for ENGINE in $ENGINES; do
  case $ENGINE in
    nanoserve)
      say "nanoserve serve: start (port $NANO_PORT)"
      # shellcheck disable=SC2086
      PYTHONPATH="$FLASH_SITE:$SHIM:$PYTHONPATH" setsid python3 -m nanoserve.serve "$MODEL" --host 127.0.0.1 \
        --port "$NANO_PORT" --served-model-name "$NAME" --max-model-len "$MAX_MODEL_LEN" \
        --gpu-memory-utilization "$GPU_UTIL" --log-level warning "${SKIP[@]}" $NANOSERVE_ARGS \
        >"$OUT/nanoserve_server.log" 2>&1 &
      SERVER_PID=$!
      wait_healthy "$NANO_PORT" "$NANO_START_TIMEOUT" "$OUT/nanoserve_server.log" \
        && PYTHONPATH="$SHIM:$PYTHONPATH" run_rates nanoserve "$NANO_PORT"
      ;;
    vllm)
      if [ ! -d "$VLLM_SITE/vllm" ]; then say "vLLM is not installed in $VLLM_SITE: skipped"; continue; fi
      say "vllm serve: start (port $VLLM_PORT; about 100 s to answer)"
      # shellcheck disable=SC2086
      PYTHONPATH="$VLLM_SITE:$PYTHONPATH" VLLM_USE_FLASHINFER_SAMPLER=0 setsid python3 -m vllm.entrypoints.cli.main \
        serve "$MODEL" --host 127.0.0.1 --port "$VLLM_PORT" --served-model-name "$NAME" \
        --max-model-len "$MAX_MODEL_LEN" --gpu-memory-utilization "$GPU_UTIL" "${SKIP[@]}" $VLLM_ARGS \
        >"$OUT/vllm_server.log" 2>&1 &
      SERVER_PID=$!
      wait_healthy "$VLLM_PORT" "$VLLM_START_TIMEOUT" "$OUT/vllm_server.log" \
        && PYTHONPATH="$SHIM:$PYTHONPATH" run_rates vllm "$VLLM_PORT"
      ;;
    *) say "unknown engine $ENGINE: skipped"; continue ;;
  esac
  stop_server
  say "$ENGINE: stopped"
done

n=$(ls "$RUNDIR"/*.json 2>/dev/null | wc -l)
if [ "$n" -eq 0 ]; then say "no results were written; the last lines of the log:"; tail -40 "$LOG"; exit 1; fi
python3 - "$RUNDIR" "$OUT/serve_results.json" <<'PY'
import json, pathlib, sys
files = sorted(pathlib.Path(sys.argv[1]).glob("*.json"))
pathlib.Path(sys.argv[2]).write_text(json.dumps({f.name: json.loads(f.read_text()) for f in files}) + "\n")
print(f"{len(files)} results -> {sys.argv[2]}")
PY
echo
PYTHONPATH="$SHIM:$PYTHONPATH" python3 -m nanobench.serve summary "$RUNDIR" | tee "$OUT/summary.md"
