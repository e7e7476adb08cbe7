# Sourced on the GPU machine by real_model_call.sh and final_check.sh: join the SmolLM2 GGUF's stashed parts into
# $NANOSERVE_CACHE and check them, install flash-attn and the small wheels, set the Python path (returns 1 on a bad
# checksum).
S=/root/stash/smol; mkdir -p "$S"
cp .gpu/smol3/* "$S/" 2>/dev/null  # the third part travels with the run call, or was stashed before it
export NANOSERVE_CACHE=/tmp/nanoserve-cache; mkdir -p "$NANOSERVE_CACHE"
cat "$S"/smolpart_00 "$S"/smolpart_01 "$S"/smolpart_02 > "$NANOSERVE_CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
echo "$(cat "$S/SHA256")  $NANOSERVE_CACHE/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c - || return 1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
