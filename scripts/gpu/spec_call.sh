#!/usr/bin/env bash
# Chapter 18's H200 session (no network there). What travels is bigger than one call may carry, so it goes in
# parts, one call each, right after one another (/root/stash lasts while the machine stays warm):
#   bash scripts/gpu/spec_call.sh stash spec/NN   carrying .gpu/spec/NN (NN = 00..07: vLLM 0.24.0, its offline deps,
#                                                 numba and llvmlite, as one tar split in 42 MB parts; the
#                                                 join takes part* in name order, so a part may travel as two
#                                                 halves, spec/00a and spec/00b: with the checkout as it is
#                                                 now (22 MB) a whole part no longer fits a call's 64 MiB, so
#                                                 make halves named partXX0 and partXX1 (`head -c`/`tail -c`) and
#                                                 stash sixteen; each call only once the one before returned)
#   bash scripts/gpu/spec_call.sh stash smolK     carrying .gpu/smolK (K = 1, 2, 3: the SmolLM2 GGUF in three parts,
#                                                 the third with its SHA256; with the checkout it is too big to
#                                                 travel with the run call)
#   bash scripts/gpu/spec_call.sh run             carrying .gpu/spec/08, .gpu/spec/SHA256, the flash-attn wheel and
#                                                 .gpu/wheels: installs (once per machine), then the bench
# A call that moves the checkout's .git away makes the next call on that warm machine fail ("the call failed on the
# device"); set NANOSERVE_GIT_COMMIT for the provenance instead.
#   bash scripts/gpu/spec_call.sh test            the same carry; installs if needed, then the spec-decode GPU tests
#                                                 (MORE_TESTS: other test files to run in the same call)
# (.gpu/spec is made on the CPU machine: tar the wheels into one file, `split -b 24m -d -a 2`, one folder per part
#  .gpu/spec/NN/partNN, its sha256 in .gpu/spec/SHA256; 24 MiB parts fit a call beside the 38 MiB checkout.)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
S=/root/stash; mkdir -p "$S/spec" "$S/smol"
if [[ "$1" == stash ]]; then
  case "$2" in spec/*) cp .gpu/"$2"/* "$S/spec/";; smol*) cp .gpu/"$2"/* "$S/smol/";; esac
  ls "$S/spec" "$S/smol" | tr '\n' ' '; echo; exit 0
fi
export NANOSERVE_CACHE=/tmp/nanoserve-cache; mkdir -p "$NANOSERVE_CACHE"
GGUF=$NANOSERVE_CACHE/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ ! -f /tmp/installed ]]; then  # a later call on the same warm machine skips the install
  bash scripts/gpu/install_spec_pack.sh || exit 1
  cp .gpu/smol3/* "$S/smol/" 2>/dev/null  # when the third part travels with this call
  cat "$S"/smol/smolpart_00 "$S"/smol/smolpart_01 "$S"/smol/smolpart_02 > "$GGUF"
  echo "$(cat "$S/smol/SHA256")  $GGUF" | sha256sum -c - || exit 1
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
  touch /tmp/installed
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT=${OUT:-/tmp/spec_out}; mkdir -p "$OUT"
if [[ "$1" == test ]]; then  # the GPU tests, on their own call
  timeout "${LIMIT:-400}" python3 -m pytest -q tests/gpu/test_spec_decode_gpu.py ${MORE_TESTS:-} -p no:cacheprovider 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -15
  exit 0
fi
timeout "${LIMIT:-540}" python3 scripts/gpu/spec_decode_bench.py --gguf "$GGUF" --out "$OUT" 2>&1 | grep -v "Warning\|warn(" \
  | tail -60
ls "$OUT"
