#!/usr/bin/env bash
# Set up .venv (if needed) and execute every chapter headless on CPU.
# Chapters run on copies in a temp dir, so the committed notebooks are never modified.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/run_course.py
