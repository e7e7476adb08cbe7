"""Numbers in a chapter's prose must be true: each measured number points at an output that prints it.

In Markdown, a number followed by `<!--o-->` (after the number or after its unit) is a quoted result: it must
appear, as written, as a number in one of the chapter's outputs (recorded GPU outputs included, since a run
replays them). `<!--f-->` marks a fact, a definition or a setting instead. A number directly followed by a
unit (ms, s, tok/s, GB, ×, %, …) with neither marker is a problem: unmarked, nobody can tell where it came from.
"""
import json
import re
from pathlib import Path

NUMBER = r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)"
UNIT = r"(?:\s?(?:tokens/s|tok/s|ms|µs|us|s|GB|GiB|MB|MiB|KB|KiB|TB|%)(?![\w/])|×|x(?![\w]))"
MARK = r"\s?<!--\s*([of])\s*-->"
QUOTED = re.compile(NUMBER + r"(?:" + MARK + r"(" + UNIT + r")?|(" + UNIT + r")(?:" + MARK + r")?)")
NUMBER_TOKEN = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
HIDDEN = [re.compile(p, re.S) for p in (r"```.*?```", r"`[^`]*`", r"\$\$.*?\$\$", r"\$[^$\n]*\$",
                                        r"<(?!!--)[^>]*>", r"\]\([^)]*\)")]


def _plain(number: str) -> str:
    """A number without thousands separators or a trailing comma."""
    return number.rstrip(",").replace(",", "")


def output_numbers(nb: dict) -> set:
    """Every number printed by the chapter's code cells (text, stream, HTML and markdown outputs)."""
    found = set()
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")]
            for mime in ("text/plain", "text/html", "text/markdown"):
                texts.append(out.get("data", {}).get(mime, ""))
            for text in texts:
                text = "".join(text) if isinstance(text, list) else text
                found.update(_plain(t) for t in NUMBER_TOKEN.findall(text))
    return found


def _visible(markdown: str) -> str:
    """Markdown with code, math, HTML tags and link targets blanked out (same length, so positions hold)."""
    for pattern in HIDDEN:
        markdown = pattern.sub(lambda m: " " * len(m.group(0)), markdown)
    return markdown


def prose_problems(nb_path: Path) -> list:
    """Unmarked measured-looking numbers, and marked results that no output prints, in one chapter."""
    nb = json.loads(Path(nb_path).read_text())
    printed = output_numbers(nb)
    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for match in QUOTED.finditer(_visible("".join(cell["source"]))):
            number = match.group(1)
            mark = match.group(2) or match.group(5)
            unit = (match.group(3) or match.group(4) or "").strip()
            shown = f"{number}{unit and ' ' + unit if unit not in ('×', 'x', '%') else unit}"
            if mark is None:
                if unit:
                    problems.append(f" cell {i}: '{shown}' has no <!--o--> (printed result) or <!--f--> (fact) marker")
            elif mark == "o" and _plain(number) not in printed:
                problems.append(f" cell {i}: '{shown}' is marked as a printed result but no output prints {number}")
    return problems
