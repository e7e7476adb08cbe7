#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root: joins the vLLM pack stashed by `spec_call.sh stash spec/NN`
# with any part carried in this call (.gpu/spec/NN/partNN), checks its sha256 against the carried .gpu/spec/SHA256
# and installs vLLM 0.24.0 and its deps (offline and serving, all in the pack) into /tmp/vsite. Does nothing when /tmp/vsite already has vLLM (a later call on the same warm machine).
set -uo pipefail
[ -d /tmp/vsite/vllm ] && exit 0
S=/root/stash; mkdir -p "$S/spec"
cp .gpu/spec/[0-9]*/part* "$S/spec/" 2>/dev/null; cat "$S"/spec/part* > /tmp/all.tar
echo "$(cat .gpu/spec/SHA256)  /tmp/all.tar" | sha256sum -c - || exit 1
mkdir -p /tmp/pack && tar xf /tmp/all.tar -C /tmp/pack && rm /tmp/all.tar
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite /tmp/pack/w/*.whl
