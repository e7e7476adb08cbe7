#!/usr/bin/env bash
# Build the book: every chapter and appendix as committed (their outputs, figures, GPU recordings and
# widget snapshots; nothing is executed) rendered by Sphinx + myst-nb into build/book/html.
# Any Sphinx warning fails the build: a missing figure, a broken cross-reference, a Markdown table that
# did not render, a GPU cell without its recording. Prints the build time.
#   bash scripts/build_book.sh
#   .venv/bin/python -m http.server -d build/book/html -b 127.0.0.1 8000   # then open http://127.0.0.1:8000
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
[[ -x .venv/bin/python ]] || bash scripts/setup.sh
VPY=.venv/bin/python
if ! "$VPY" -c "import sphinx, myst_nb, sphinx_book_theme" 2>/dev/null; then
  # the book extra of pyproject.toml, without reinstalling nanoserve (and so without touching torch)
  mapfile -t reqs < <("$VPY" -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['book']))")
  echo "build_book: installing the book extra: ${reqs[*]}"
  "$VPY" -m pip install --progress-bar off "${reqs[@]}" > >(grep --line-buffered -E "^(Collecting|Successfully)")  # one line a package
fi
rm -rf build/book
built=$SECONDS
"$VPY" -m sphinx -W --keep-going -q -b html book build/book/html
pages=$(find build/book/html/chapters -name '*.html' | wc -l)
echo "build_book: ${pages} chapter pages in build/book/html (sphinx $((SECONDS - built)) s, total $((SECONDS - start)) s)"
