#!/usr/bin/env bash
# Set up .venv (the first time; later it only checks) and open the chapters in JupyterLab.
#   bash scripts/lab.sh                     # extra arguments go to jupyter lab, e.g. --no-browser --port 8890
# As root (containers, cloud notebooks) JupyterLab refuses to start without --allow-root; this adds it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
args=()
if [[ "$(id -u)" -eq 0 ]]; then
  echo "lab.sh: running as root, so JupyterLab gets --allow-root"
  args+=(--allow-root)
fi
exec .venv/bin/jupyter lab ${args[@]+"${args[@]}"} "$@" chapters/
