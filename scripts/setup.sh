#!/usr/bin/env bash
# Create .venv (if absent) and install nanoserve with its dev and course extras.
#   bash scripts/setup.sh              # user set-up: plain torch (kept if already installed)
#   bash scripts/setup.sh --cpu-torch  # test/CI set-up: CPU-only torch via constraints-cpu.txt
# Idempotent: a second run with unchanged pyproject.toml/constraints only checks imports.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=user
if [[ "${1:-}" == "--cpu-torch" ]]; then mode=cpu; fi

PYTHON_BIN="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  echo "set-up: creating .venv with $("$PYTHON_BIN" --version 2>&1)"
  "$PYTHON_BIN" -m venv .venv
fi
VPY=.venv/bin/python

inputs_hash=$(cat pyproject.toml constraints-cpu.txt | "$VPY" -c "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])")
stamp=".venv/.nanoserve-setup-$inputs_hash"
installed_ok() {  # cheap check: the key packages are findable without importing them
  "$VPY" -c "
import importlib.util, sys
mods = ['nanoserve', 'torch', 'transformers', 'nbval', 'nbdev', 'pytest', 'jupytext', 'matplotlib']
sys.exit(0 if all(importlib.util.find_spec(m) for m in mods) else 1)" 2>/dev/null
}
torch_version() { "$VPY" -c "from importlib.metadata import version; print('torch', version('torch'))"; }
if [[ -f "$stamp" ]] && installed_ok; then
  echo "set-up: .venv is up to date ($(torch_version))"
  exit 0
fi

pip_install() { "$VPY" -m pip install --quiet "$@"; }
have_torch() { "$VPY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; }

if [[ "$mode" == cpu ]] && ! have_torch; then
  echo "set-up: installing nanoserve[dev,course] with a CPU-only torch (constraints-cpu.txt)"
  if ! pip_install -c constraints-cpu.txt -e ".[dev,course]"; then
    echo "set-up: note: the pinned CPU-only torch wheel is not available here;" \
         "falling back to a plain torch (this may download CUDA libraries)"
    pip_install -e ".[dev,course]"
  fi
else
  if have_torch; then
    echo "set-up: installing nanoserve[dev,course] (keeping the installed torch)"
  else
    echo "set-up: installing nanoserve[dev,course]"
  fi
  pip_install -e ".[dev,course]"
fi

installed_ok || { echo "set-up: installation incomplete" >&2; exit 1; }
rm -f .venv/.nanoserve-setup-*
touch "$stamp"
echo "set-up: done ($(torch_version))"
