#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root: joins the flash-attn-4 pack stashed by
# `flash4_call.sh stash a|b|c`, checks it and installs it into /tmp/fa4site, the kit's flash-attn 2 and .gpu/wheels
# into /tmp/site, and both flash-attn packages side by side into /tmp/both. Once per warm machine.
# Afterwards: PYTHONPATH=$WITH_FA4 (printed by `source`-ing this file) puts both on the path.
S=/root/stash/fa4
WITH_FA4=/tmp/both:/tmp/site:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages
if [[ ! -f /tmp/flash4_installed ]]; then
  W="$S/$(cat "$S/cu13.name")"; cat "$S"/cu13.part[0-9] > "$W"  # however many parts it travelled in
  echo "$(cat "$S/cu13.sha256")  $W" | sha256sum -c - || return 1 2>/dev/null || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fa4site "$S"/*.whl || return 1 2>/dev/null || exit 1
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl .gpu/wheels/*.whl
  mkdir -p /tmp/both && cp -r /tmp/site/flash_attn /tmp/both/ && cp -r /tmp/fa4site/flash_attn/cute /tmp/both/flash_attn/
  touch /tmp/flash4_installed
fi
