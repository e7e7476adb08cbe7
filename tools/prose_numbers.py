"""Numbers in a chapter's prose must be true: each measured number points at an output that prints it.

In Markdown, a number followed by `<!--o-->` (after the number or after its unit) is a quoted result; `<!--f-->`
marks a fact, a definition or a setting instead. A number directly followed by a measuring unit (ms, µs, s, tok/s,
GB, MiB, ×, %, …) with neither marker is a problem: unmarked, nobody can tell where it came from.

Counting words do not drown the check. A number is only looked at when it carries a measuring unit or a marker:
spelled-out numbers ("two", "a dozen") and bare or counted integers ("3 steps", "16 tokens per block", "256
prompts") are prose, never flagged unmarked. A counting noun (tokens, blocks, slots, requests, sequences, steps,
prompts, runs, layers) is a unit only after a marker: "392<!--o--> steps" must be printed next to "steps" (or
"step"), while an unmarked "392 steps" is left alone, like any count.

The strict rule (every chapter not in LOOSE, or `nb.py numbers --strict`):
* A quoted result must be printed, with its unit when the prose gives one, by a code cell of the same section
  (Markdown heading to the next heading; a Summary section may cite the whole chapter), or by the recording named
  in the marker (`<!--o:NAME-->`, a GPU recording in chapters/recordings/). "With its unit" means the unit follows
  the number, or precedes it on its line, or heads its column within twelve lines above (a table).
* Code is never evidence, comments included; a comment in an unexported code cell that quotes a measured-looking
  number (a number with a measuring unit) is analysis hidden from this check and is flagged.
* Stale sessions. A stamp is a date or session id (`2026-12-01`, `2026-12-01T12:00:48Z`) or a commit id written
  after the word "commit" or "git" (`commit bb823b3`). A stamp the prose states that no output or recording of the
  chapter prints is stale. A stamp printed by the outputs of a section whose prose quotes results (or by a
  recording it cites) must be one the chapter's prose states (the same id, or a date that starts it): the numbers
  come from that session, so the prose names it. Library versions ("vLLM 0.24.0") are not stamps: prose quotes
  them as requirements as often as sessions, so they cannot be told apart cheaply.
The loose rule (other chapters, until they pass): a quoted result's bare number must appear somewhere in the
chapter's outputs.
"""
import io
import json
import re
import tokenize
from pathlib import Path

# every chapter is held to the strict rule; a chapter named here would get the loose one (none is)
LOOSE = ()


def is_strict(stem: str) -> bool:
    """Whether the strict number rule applies to the chapter `stem` (all chapters but LOOSE ones)."""
    return stem not in LOOSE


NUMBER = r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)"
MEASURE = r"(?:\s?(?:tokens/s|tok/s|ms|µs|us|s|GB|GiB|MB|MiB|KB|KiB|TB|%)(?![\w/])|×|x(?![\w]))"
COUNTS = ("tokens", "blocks", "slots", "requests", "sequences", "steps", "prompts", "runs", "layers")
COUNT = r"(?:\s(?:" + "|".join(c[:-1] + "s?" for c in COUNTS) + r")(?![\w/-]))"
UNIT = r"(?:" + MEASURE + "|" + COUNT + ")"
MARK = r"\s?<!--\s*([of])(?::([\w.-]+))?\s*-->"
QUOTED = re.compile(NUMBER + r"(?:" + MARK + r"(" + UNIT + r")?|(" + UNIT + r")(?:" + MARK + r")?)")
NUMBER_TOKEN = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
HIDDEN = [re.compile(p, re.S) for p in (r"```.*?```", r"`[^`]*`", r"\$\$.*?\$\$", r"\$[^$\n]*\$",
                                        r"<(?!!--)[^>]*>", r"\]\([^)]*\)")]
HEADING = re.compile(r"^#{1,6}\s", re.M)
DATE = re.compile(r"(?<![\w-])20\d\d-[01]\d-[0-3]\d(?:T\d\d:\d\d(?::\d\d)?Z?)?(?![\w-])")
COMMIT = re.compile(r"\b(?:commit|git)\b[\s:=`'\"]*([0-9a-f]{7,40})(?![0-9a-zA-Z])", re.I)
COMMENT_RESULT = re.compile(NUMBER + r"(" + MEASURE + r")")
# the same unit as printed by an output: tok/s and tokens/s are one unit, x and × too
UNIT_ALIASES = {"tok/s": r"(?:tok/s|tokens/s)", "tokens/s": r"(?:tok/s|tokens/s)", "×": r"[×x]", "x": r"[×x]",
                "µs": r"(?:µs|us)", "us": r"(?:µs|us)"}


def _plain(number: str) -> str:
    """A number without thousands separators or a trailing comma."""
    return number.rstrip(",").replace(",", "")


def _texts(cell: dict) -> list:
    """The printed texts of one code cell's outputs (stream, text, HTML and markdown); a stream is one text however
    many chunks the kernel sent it in (a busy machine splits a table from its header)."""
    streams, texts = {}, []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            streams[out.get("name")] = streams.get(out.get("name"), "") + "".join(out.get("text", ""))
            continue
        candidates = [out.get("text", "")] + [out.get("data", {}).get(m, "")
                                              for m in ("text/plain", "text/html", "text/markdown")]
        texts += ["".join(t) if isinstance(t, list) else t for t in candidates]
    return [t for t in [*streams.values(), *texts] if t]


def output_numbers(nb: dict) -> set:
    """Every number printed by the chapter's code cells (text, stream, HTML and markdown outputs)."""
    return {_plain(t) for cell in nb["cells"] for text in _texts(cell) for t in NUMBER_TOKEN.findall(text)}


def _count_noun(unit: str) -> bool:
    """Whether `unit` is a counting noun (blocks, step, ...), a unit only after a marker."""
    return unit.rstrip("s") + "s" in COUNTS


def _unit_pattern(unit: str) -> re.Pattern:
    """A regex finding `unit` as a word of printed text (a counting noun singular or plural)."""
    body = UNIT_ALIASES.get(unit, re.escape(unit.rstrip("s")) + "s?" if _count_noun(unit) else re.escape(unit))
    return re.compile(r"(?<![\w/])" + body + r"(?![\w/])" if unit not in ("×", "%") else body)


def printed_at(text: str, number: str, unit: str) -> list:
    """Lines of `text` printing `number`, with `unit` right after it or on its line or a line above (a table header)."""
    want = _plain(number)
    unit_re = _unit_pattern(unit) if unit else None
    lines, found = text.splitlines(), []
    for i, line in enumerate(lines):
        for m in NUMBER_TOKEN.finditer(line):
            if _plain(m.group(0)) != want:
                continue
            if (unit_re is None or unit_re.match(line[m.end():].lstrip()) or unit_re.search(line[:m.start()])
                    or any(unit_re.search(above) for above in lines[max(0, i - 12):i])):
                found.append(i)
                break
    return found


def prints_number(text: str, number: str, unit: str) -> bool:
    """Whether `text` prints `number` with its unit (see printed_at)."""
    return bool(printed_at(text, number, unit))


def stamp_of(text: str, line: int) -> set:
    """The session stamps a printed line carries: its own, else those of the nearest line above that has one."""
    lines = text.splitlines()
    for above in reversed(lines[:line + 1]):
        if stamps(above):
            return stamps(above)
    return set()


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


def stamps(text: str) -> set:
    """The session stamps in `text`: dates and session ids, and commit ids written after "commit" or "git"."""
    return set(DATE.findall(text)) | {c.lower() for c in COMMIT.findall(text)}


def _covered(stamp: str, stated: set) -> bool:
    """Whether a printed stamp is one the prose states: the same id, or one of the two starts the other."""
    stamp = stamp.lower()
    return any(stamp.startswith(s.lower()) or s.lower().startswith(stamp) for s in stated)


def prose_problems(nb_path: Path, strict: bool | None = None) -> list:
    """Unmarked measured-looking numbers, and marked results that no output prints, in one chapter."""
    nb_path = Path(nb_path)
    strict = is_strict(nb_path.stem) if strict is None else strict
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

    def section_at(i: int, pos: int) -> int:
        """The section a character at `pos` of cell i sits in."""
        start, heads = section_of[i]
        return start + sum(h <= pos for h in heads)

    def is_summary(section: int) -> bool:
        return titles.get(section, "").lower().startswith("summary")

    stated = set().union(*(stamps("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "markdown"))

    def backed(texts: list, number: str, unit: str, default: set = frozenset()) -> tuple:
        """(printed at all, printed under a stamp the prose states or under none; the unstated stamps seen)."""
        seen, unstated = False, []
        for text in texts:
            for line in printed_at(text, number, unit):
                seen = True
                carried = stamp_of(text, line) or set(default)
                missing = sorted(st for st in carried if not _covered(st, stated))
                if not missing:
                    return True, True, []
                unstated += missing
        return seen, False, list(dict.fromkeys(unstated))

    def judge(i: int, shown: str, number: str, unit: str, texts: list, where: str, default=frozenset()) -> list:
        """The problems of one quoted result against the texts it may cite."""
        seen, ok, unstated = backed(texts, number, unit, default)
        if ok:
            return []
        if seen:  # gathered per cell and stamp, reported after the cell
            under_stamps.setdefault(tuple(unstated), []).append(shown)
            return []
        if recording_name := where.removeprefix("recording:"):
            if recording_name != where:
                return [f" cell {i}: '{shown}' is not printed by recording \"{recording_name}\""
                        + (" with its unit" if unit else "")]
        unitless = unit and any(prints_number(t, number, "") for t in texts)
        return [f" cell {i}: '{shown}' is marked as a printed result but "
                + (f"this section's outputs print {number} without '{unit}'" if unitless else
                   f"no output of this section prints {number}" + (f" {unit}" if unit else ""))]

    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            problems += _comment_problems(i, cell) if strict else []
            continue
        if cell["cell_type"] != "markdown":
            continue
        source, under_stamps = "".join(cell["source"]), {}
        for match in QUOTED.finditer(_visible(source)):
            number = match.group(1)
            mark, recording = (match.group(2), match.group(3)) if match.group(2) else (match.group(6), match.group(7))
            unit = (match.group(4) or match.group(5) or "").strip()
            shown = f"{number}{unit and ' ' + unit if unit not in ('×', 'x', '%') else unit}"
            if mark is None:
                if unit and not _count_noun(unit):
                    problems.append(f" cell {i}: '{shown}' has no <!--o--> (printed result) or <!--f--> (fact) marker")
            elif mark != "o":
                continue
            elif not strict:
                if _plain(number) not in printed:
                    problems.append(f" cell {i}: '{shown}' is marked as a printed result but no output prints {number}")
            elif recording is not None:
                if recording not in recordings:
                    problems.append(f" cell {i}: '{shown}' cites recording \"{recording}\", which this chapter lacks")
                else:
                    texts, date = recordings[recording][:-1], recordings[recording][-1]
                    problems += judge(i, shown, number, unit, texts, "recording:" + recording, stamps(date))
            else:
                section = section_at(i, match.start())
                problems += judge(i, shown, number, unit,
                                  chapter_texts if is_summary(section) else by_section.get(section, []), "section")
        for unstated, shown_all in under_stamps.items():
            problems.append(f" cell {i}: " + ", ".join(f"'{x}'" for x in shown_all) + " printed only under session "
                            + " and ".join(f"'{st}'" for st in unstated) + ", which the chapter's prose never states: "
                            "name the session these numbers come from (or is it a stale one?)")
        if strict:
            for stamp in sorted(stamps(source), key=lambda s: source.lower().find(s.lower())):
                if not any(stamp.lower() in t.lower() for t in every_text):
                    problems.append(f" cell {i}: '{stamp}' (a date, session or commit id) is printed by no output or "
                                    "recording of this chapter: stale?")
    return problems
