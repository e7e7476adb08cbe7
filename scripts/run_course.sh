#!/usr/bin/env bash
# Set up .venv (if needed) and execute every chapter headless on CPU.
# Chapters run on copies in a temp dir, so the committed notebooks are never modified.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# hide the kernel's one-line warning about its local TCP transport, once per chapter
exec .venv/bin/python scripts/run_course.py 2> >(grep -v "running over TCP without encryption" >&2)
