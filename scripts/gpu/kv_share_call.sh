#!/usr/bin/env bash
# gpu_memory_utilization as this engine's own share (appendix A5): tests/gpu/test_kv_sizing_gpu.py against the package
# before the change (BEFORE, default .gpu/before_kv: `git archive COMMIT nanoserve`; expected to fail) and this tree,
# then the GPU suite on flash-attn 2. Carrying the flash-attn wheel, .gpu/wheels and BEFORE. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/kv_share_out}; mkdir -p "$OUT"; BEFORE=${BEFORE:-.gpu/before_kv}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
T="python3 -m pytest -q -p no:cacheprovider"
# -P and importlib mode: neither the working directory nor the root conftest's folder goes before $BEFORE on the path
PYTHONPATH=/tmp/site:$PWD/$BEFORE:$PWD python3 -P -c "import nanoserve; print('package before:', nanoserve.__file__)"
PYTHONPATH=/tmp/site:$PWD/$BEFORE:$PWD timeout 120 python3 -P -m pytest -q -p no:cacheprovider --import-mode=importlib \
  tests/gpu/test_kv_sizing_gpu.py >"$OUT/before.log" 2>&1
echo "new test, package before: exit $?"; tail -1 "$OUT/before.log"
PYTHONPATH=/tmp/site:$PWD timeout 120 $T tests/gpu/test_kv_sizing_gpu.py >"$OUT/after.log" 2>&1
echo "new test, this tree: exit $?"; tail -1 "$OUT/after.log"
[[ ${SUITE:-1} == 1 ]] && { PYTHONPATH=/tmp/site:$PWD timeout "${TEST_LIMIT:-300}" $T tests/gpu >"$OUT/gpu_tests.log" 2>&1
echo "GPU suite (flash-attn 2): exit $?"; grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -5; tail -1 "$OUT/gpu_tests.log"; }
echo "kv_share_call: ${SECONDS} s"
