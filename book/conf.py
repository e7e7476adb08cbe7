"""Sphinx configuration of the nanoserve book: the committed chapter notebooks, rendered without running them.

Build it with `bash scripts/build_book.sh` (installs the `book` extra, fails on warnings).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "nanoserve"
author = "the nanoserve authors"
copyright = "the nanoserve authors, Apache-2.0"
html_title = "nanoserve"

extensions = ["myst_nb", "nanobook"]
root_doc = "index"
# chapters/ and figures/ are links to the repository's folders; only their notebooks and images are pages
exclude_patterns = ["figures/README.md", "chapters/recordings/**", "**/.ipynb_checkpoints"]

# the book shows what the notebooks hold; nothing is executed
nb_execution_mode = "off"
# a widget cannot run on a static page: show the picture of its first state (image/png in the same
# output, written by course.snapshots) instead of an empty widget view, and load no widget
# scripts from the internet
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js = {}
nb_merge_streams = True
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["nanobook.css"]
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "navigation_with_keys": False,
    "show_navbar_depth": 1,
}
# a broken page must fail the build (scripts/build_book.sh passes -W); a heading that skips a level
# (H1 to H3) reads fine and breaks nothing, so it alone is not a warning here
suppress_warnings = ["myst.header"]
