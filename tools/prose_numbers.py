"""Numbers in a chapter's prose must be true: each measured number points at an output that prints it.

In Markdown, a number followed by `<!--o-->` (after the number or after its unit) is a quoted result; `<!--f-->`
marks a fact, a definition or a setting instead. A number directly followed by a unit (ms, s, tok/s, GB, ×, %, …)
with neither marker is a problem: unmarked, nobody can tell where it came from.

The strict rule (chapters in STRICT, or `nb.py numbers --strict`): a quoted result must be printed, with its unit
when the prose gives one, by a code cell of the same section (Markdown heading to heading; a Summary section may cite the whole chapter), or by the recording
named in the marker (`<!--o:NAME-->`, a GPU recording in chapters/recordings/). Code is never evidence, comments
included; a comment in an unexported code cell that quotes a measured-looking number is analysis hidden from this
check and is flagged. A date or session id (`2026-12-01`, `2026-12-01T12:00:48Z`) in prose that no output or
recording of the chapter shows is stale. The loose rule (other chapters, until they pass): a quoted result's bare
number must appear somewhere in the chapter's outputs.
"""
import io
import json
import re
import tokenize
from pathlib import Path

# chapters held to the strict rule; extend this list as chapters pass it
STRICT = ("00_tour", "01_qwen3", "02_kv_cache", "03_paged_kv", "04_prefix_cache", "05_scheduler", "11_benchmark",
          "A1_tokenizer")

NUMBER = r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)"
UNIT = r"(?:\s?(?:tokens/s|tok/s|ms|µs|us|s|GB|GiB|MB|MiB|KB|KiB|TB|%)(?![\w/])|×|x(?![\w]))"
MARK = r"\s?<!--\s*([of])(?::([\w.-]+))?\s*-->"
QUOTED = re.compile(NUMBER + r"(?:" + MARK + r"(" + UNIT + r")?|(" + UNIT + r")(?:" + MARK + r")?)")
NUMBER_TOKEN = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
HIDDEN = [re.compile(p, re.S) for p in (r"```.*?```", r"`[^`]*`", r"\$\$.*?\$\$", r"\$[^$\n]*\$",
                                        r"<(?!!--)[^>]*>", r"\]\([^)]*\)")]
HEADING = re.compile(r"^#{1,6}\s", re.M)
DATE = re.compile(r"(?<![\w-])20\d\d-[01]\d-[0-3]\d(?:T\d\d:\d\d(?::\d\d)?Z?)?(?![\w-])")
COMMENT_RESULT = re.compile(NUMBER + r"(" + UNIT + r")")
# the same unit as printed by an output: tok/s and tokens/s are one unit, x and × too
UNIT_ALIASES = {"tok/s": r"(?:tok/s|tokens/s)", "tokens/s": r"(?:tok/s|tokens/s)", "×": r"[×x]", "x": r"[×x]",
                "µs": r"(?:µs|us)", "us": r"(?:µs|us)"}


def _plain(number: str) -> str:
    """A number without thousands separators or a trailing comma."""
    return number.rstrip(",").replace(",", "")


def _texts(cell: dict) -> list:
    """The printed texts of one code cell's outputs (stream, text, HTML and markdown)."""
    texts = []
    for out in cell.get("outputs", []):
        candidates = [out.get("text", "")] + [out.get("data", {}).get(m, "")
                                              for m in ("text/plain", "text/html", "text/markdown")]
        texts += ["".join(t) if isinstance(t, list) else t for t in candidates]
    return [t for t in texts if t]


def output_numbers(nb: dict) -> set:
    """Every number printed by the chapter's code cells (text, stream, HTML and markdown outputs)."""
    return {_plain(t) for cell in nb["cells"] for text in _texts(cell) for t in NUMBER_TOKEN.findall(text)}


def _unit_pattern(unit: str) -> re.Pattern:
    """A regex finding `unit` as a word of printed text."""
    body = UNIT_ALIASES.get(unit, re.escape(unit))
    return re.compile(r"(?<![\w/])" + body + r"(?![\w/])" if unit not in ("×", "%") else body)


def prints_number(text: str, number: str, unit: str) -> bool:
    """Whether `text` prints `number`, with `unit` right after it or on its line or a line above (a table header)."""
    want = _plain(number)
    unit_re = _unit_pattern(unit) if unit else None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        for m in NUMBER_TOKEN.finditer(line):
            if _plain(m.group(0)) != want:
                continue
            if unit_re is None or unit_re.match(line[m.end():].lstrip()) or unit_re.search(line[:m.start()]):
                return True
            if any(unit_re.search(above) for above in lines[max(0, i - 12):i]):
                return True
    return False


def _visible(markdown: str) -> str:
    """Markdown with code, math, HTML tags and link targets blanked out (same length, so positions hold)."""
    for pattern in HIDDEN:
        markdown = pattern.sub(lambda m: " " * len(m.group(0)), markdown)
    return markdown


def sections(nb: dict) -> tuple:
    """Per cell, (section in force where it starts, offsets of the headings inside it); and each section's title."""
    index, out, titles = 0, [], {0: ""}
    for cell in nb["cells"]:
        heads = []
        if cell["cell_type"] == "markdown":
            text = _visible("".join(cell["source"]))
            for m in HEADING.finditer(text):
                heads.append(m.start())
                titles[index + len(heads)] = text[m.end():].split("\n", 1)[0].strip()
        out.append((index, heads))
        index += len(heads)
    return out, titles


def recordings_of(nb_path: Path) -> dict:
    """name -> printed texts of the chapter's GPU recordings (chapters/recordings/<stem>.json)."""
    path = Path(nb_path).parent / "recordings" / f"{Path(nb_path).stem}.json"
    if not path.exists():
        return {}
    cells = json.loads(path.read_text())["cells"]
    return {name: _texts(rec) + [str(rec.get("recorded", ""))] for name, rec in cells.items()}


def _comment_problems(i: int, cell: dict) -> list:
    """Measured-looking numbers in the comments of an unexported code cell: analysis the check cannot see."""
    src = "".join(cell["source"])
    if src.lstrip().startswith("#| export"):
        return []
    problems = []
    try:
        comments = [t.string[1:] for t in tokenize.generate_tokens(io.StringIO(src).readline)
                    if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    for comment in comments:
        if comment.startswith(("|", " NBVAL", " GPU cell")):
            continue
        for m in COMMENT_RESULT.finditer(comment):
            problems.append(f" cell {i}: '{m.group(0).strip()}' in a code comment is analysis the number check "
                            "cannot see: move it to Markdown and print it")
    return problems


def prose_problems(nb_path: Path, strict: bool | None = None) -> list:
    """Unmarked measured-looking numbers, and marked results that no output prints, in one chapter."""
    nb_path = Path(nb_path)
    strict = nb_path.stem in STRICT if strict is None else strict
    nb = json.loads(nb_path.read_text())
    printed = output_numbers(nb)
    section_of, titles = sections(nb)
    by_section = {}
    for cell, (s, _) in zip(nb["cells"], section_of):
        if cell["cell_type"] == "code":
            by_section.setdefault(s, []).extend(_texts(cell))
    recordings = recordings_of(nb_path)
    every_text = [t for texts in by_section.values() for t in texts] + [t for r in recordings.values() for t in r]
    chapter_texts = [t for texts in by_section.values() for t in texts]

    def evidence(i: int, pos: int) -> list:
        """The printed texts a number at `pos` of cell i may cite: its section's, or the chapter's in a summary."""
        start, heads = section_of[i]
        section = start + sum(h <= pos for h in heads)
        return chapter_texts if titles.get(section, "").lower().startswith("summary") else by_section.get(section, [])

    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            problems += _comment_problems(i, cell) if strict else []
            continue
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        for match in QUOTED.finditer(_visible(source)):
            number = match.group(1)
            mark, recording = (match.group(2), match.group(3)) if match.group(2) else (match.group(6), match.group(7))
            unit = (match.group(4) or match.group(5) or "").strip()
            shown = f"{number}{unit and ' ' + unit if unit not in ('×', 'x', '%') else unit}"
            if mark is None:
                if unit:
                    problems.append(f" cell {i}: '{shown}' has no <!--o--> (printed result) or <!--f--> (fact) marker")
            elif mark != "o":
                continue
            elif not strict:
                if _plain(number) not in printed:
                    problems.append(f" cell {i}: '{shown}' is marked as a printed result but no output prints {number}")
            elif recording is not None:
                if recording not in recordings:
                    problems.append(f" cell {i}: '{shown}' cites recording \"{recording}\", which this chapter lacks")
                elif not any(prints_number(t, number, unit) for t in recordings[recording]):
                    problems.append(f" cell {i}: '{shown}' is not printed by recording \"{recording}\""
                                    + (" with its unit" if unit else ""))
            elif not any(prints_number(t, number, unit) for t in evidence(i, match.start())):
                unitless = unit and any(prints_number(t, number, "") for t in evidence(i, match.start()))
                problems.append(f" cell {i}: '{shown}' is marked as a printed result but "
                                + (f"this section's outputs print {number} without '{unit}'" if unitless else
                                   f"no output of this section prints {number}" + (f" {unit}" if unit else "")))
        if strict:
            for date in DATE.findall(source):
                if not any(date in t for t in every_text):
                    problems.append(f" cell {i}: '{date}' (a date or session id) is printed by no output or "
                                    "recording of this chapter: stale?")
    return problems
