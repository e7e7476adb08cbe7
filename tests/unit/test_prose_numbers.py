"""The strict number rule of tools/prose_numbers.py: units, counting words, sections and session stamps.

(The first strict cases, a stale number, a unitless match, a number only in a code comment and one printed in
another section, are in test_tooling.py beside the loose rule.)"""
import importlib.util
from pathlib import Path

from notebook_factory import numbers_chapter

TOOL = Path(__file__).resolve().parents[2] / "tools" / "prose_numbers.py"


def tool():
    spec = importlib.util.spec_from_file_location("prose_numbers_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def strict(tmp_path, cells, **kw) -> list:
    return tool().prose_problems(numbers_chapter(tmp_path, cells, **kw), strict=True)


def test_counting_words_in_prose_are_not_flagged(tmp_path):
    prose = ("## Steps\nTwo sequences take 3 steps of 16 tokens per block, 256 prompts in 4 runs; "
             "the 1,024-token prefix spans 64 blocks.")
    assert strict(tmp_path, [("md", prose), ("code", "print(1)", "1\n")]) == []


def test_a_marked_count_must_be_printed_with_its_noun(tmp_path):
    cells = [("md", "## Steps\n0<!--o--> of 392<!--o--> steps ran eager, in 7<!--o--> blocks."),
             ("code", "print(c)", "0 of 392 steps ran eager\nblocks used: 7/24\n")]
    assert strict(tmp_path, cells) == []
    cells[1] = ("code", "print(c)", "0 of 392 ran eager, 7 in use\n")
    assert strict(tmp_path, cells) == [
        " cell 0: '392 steps' is marked as a printed result but this section's outputs print 392 without 'steps'",
        " cell 0: '7 blocks' is marked as a printed result but this section's outputs print 7 without 'blocks'"]


def test_a_measuring_unit_still_needs_a_marker(tmp_path):
    cells = [("md", "## Timing\nA step takes 4.2 ms and 3 steps."), ("code", "print(t)", "4.2 ms\n")]
    assert strict(tmp_path, cells) == [" cell 0: '4.2 ms' has no <!--o--> (printed result) or <!--f--> (fact) marker"]


def test_a_number_printed_under_a_session_the_prose_never_names_is_stale(tmp_path):
    printed = ("session 2026-11-29T08:00:00Z: 6.79 ms per step\n"
               "session 2026-12-01T12:00:48Z: 6.28 ms per step\n")
    cells = [("md", "## H200\nA step took 6.79 ms<!--o-->."), ("code", "print(s)", printed)]
    assert strict(tmp_path, cells) == [
        " cell 0: '6.79 ms' printed only under session '2026-11-29T08:00:00Z', which the chapter's prose never "
        "states: name the session these numbers come from (or is it a stale one?)"]
    # named in the prose, the same number is the session's, and a number of a stated session passes too
    cells[0] = ("md", "## H200\nIn session `2026-11-29T08:00:00Z` a step took 6.79 ms<!--o-->.")
    assert strict(tmp_path, cells) == []
    cells[0] = ("md", "## H200\nOn 2026-12-01 a step took 6.28 ms<!--o-->.")
    assert strict(tmp_path, cells) == []


def test_a_recording_of_a_date_the_prose_never_states_is_stale(tmp_path):
    recordings = {"steps": {"recorded": "2026-11-30", "source": "", "outputs": [
        {"output_type": "stream", "name": "stdout", "text": "6.28 ms\n"}]}}
    cells = [("md", "## H200\nA step took 6.28 ms<!--o:steps-->."), ("code", "print(1)", "1\n")]
    assert strict(tmp_path, cells, recordings=recordings) == [
        " cell 0: '6.28 ms' printed only under session '2026-11-30', which the chapter's prose never states: "
        "name the session these numbers come from (or is it a stale one?)"]
    cells[0] = ("md", "## H200\nRecorded on 2026-11-30: a step took 6.28 ms<!--o:steps-->.")
    assert strict(tmp_path, cells, recordings=recordings) == []


def test_commit_ids_are_stamps_too(tmp_path):
    cells = [("md", "## Engines\nnano-vllm at its commit `bb823b3` ran 16,441 tok/s<!--o-->."),
             ("code", "print(p)", "nano-vllm commit bb823b3e0698: 16441 tok/s\n")]
    assert strict(tmp_path, cells) == []
    cells[1] = ("code", "print(p)", "nano-vllm commit 1e06d71: 16441 tok/s\n")
    assert strict(tmp_path, cells) == [
        " cell 0: '16,441 tok/s' printed only under session '1e06d71', which the chapter's prose never states: "
        "name the session these numbers come from (or is it a stale one?)",
        " cell 0: 'bb823b3' (a date, session or commit id) is printed by no output or recording of this chapter: "
        "stale?"]




def test_a_table_printed_in_several_stream_chunks_keeps_its_header(tmp_path):
    """A busy machine's kernel may send a table's header and its rows as separate stream outputs."""
    import nbformat

    cells = [("md", "## Decode\nBatch 32 decodes in 1.596 ms<!--o--> per token."),
             ("code", "print(table)", "decode ms per token   b1     b32\nfrom 32 lanes        1.343  1.596\n")]
    path = numbers_chapter(tmp_path, cells)
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="decode ms per token   b1     b32"),
                           nbformat.v4.new_output("stream", name="stdout", text="\nfrom 32 lanes        1.343  1.596\n")]
    nbformat.write(nb, path)
    assert tool().prose_problems(path, strict=True) == []
