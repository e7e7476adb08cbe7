#!/usr/bin/env bash
# Set up .venv (if needed) and execute every chapter headless on CPU; the last line gives the total time.
# Chapters run on copies in a temp dir, so the committed notebooks are never modified.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
took() { local s=$((SECONDS - start)); if ((s >= 60)); then echo "$((s / 60)) min $((s % 60)) s"; else echo "$s s"; fi; }
bash scripts/setup.sh || { echo "run_course.sh: set-up failed after $(took)" >&2; exit 1; }
# hide the kernel's one-line warning about its local TCP transport, once per chapter
.venv/bin/python scripts/run_course.py "$@" 2> >(grep -v "running over TCP without encryption" >&2)
rc=$?
wait  # let the stderr filter finish before the last line
if [[ $rc -eq 0 ]]; then
  echo "run_course.sh: every chapter ran; $(took) in all, set-up included"
else
  echo "run_course.sh: FAILED (exit $rc) after $(took), set-up included"
fi
exit $rc
