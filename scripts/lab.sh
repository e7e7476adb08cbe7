#!/usr/bin/env bash
# Set up .venv (the first time; later it only checks) and open the course in JupyterLab.
#   bash scripts/lab.sh                     # extra arguments go to jupyter lab, e.g. --no-browser --port 8890
# JupyterLab serves the repository root, so its file browser shows the paths the README links to
# (chapters/00_tour.ipynb, ...), and it opens the tour, chapters/00_tour.ipynb, first.
# As root (containers, cloud notebooks) JupyterLab refuses to start without --allow-root; this adds it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
args=()
if [[ "$(id -u)" -eq 0 ]]; then
  echo "lab.sh: running as root, so JupyterLab gets --allow-root"
  args+=(--allow-root)
fi
echo "lab.sh: JupyterLab serves this repository and opens chapters/00_tour.ipynb; the chapters are in chapters/"
exec .venv/bin/jupyter lab --ServerApp.root_dir="$PWD" ${args[@]+"${args[@]}"} "$@" chapters/00_tour.ipynb
