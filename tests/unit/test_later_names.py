"""tools/nb.py static: a chapter's exported code may not use a name that only a later chapter's export defines."""
import importlib.util
from pathlib import Path

import pytest

from notebook_factory import numbers_chapter

REPO = Path(__file__).resolve().parents[2]


def load_tool(root: Path):
    """tools/nb.py with its ROOT (and so its chapters/) pointed at `root`."""
    spec = importlib.util.spec_from_file_location("nb_tool_later_names", REPO / "tools" / "nb.py")
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NANOSERVE_ROOT", str(root))
        spec.loader.exec_module(module)
    return module


def two_chapters(tmp_path, early_code: str) -> None:
    """01 exports nanoserve.early (with `early_code`), 02 exports nanoserve.later, which defines `helper`."""
    numbers_chapter(tmp_path, [("code", "#| default_exp early", ""), ("code", early_code, "")], name="01_early.ipynb")
    numbers_chapter(tmp_path, [("code", "#| default_exp later", ""),
                               ("code", "#| export\ndef helper():\n    return 2", "")], name="02_later.ipynb")


@pytest.mark.parametrize("early_code", [
    "#| export\nfrom nanoserve.later import helper\n\ndef f():\n    return helper()",
    "#| export\ndef f():\n    from nanoserve.later import helper  # a lazy import counts too\n    return helper()",
    "#| export\nimport nanoserve.later\n\ndef f():\n    return nanoserve.later.helper()",
], ids=["top-level", "lazy", "import-module"])
def test_a_forward_reference_fails_static(tmp_path, capsys, early_code):
    two_chapters(tmp_path, early_code)
    tool = load_tool(tmp_path)
    uses = tool.later_name_uses()
    assert len(uses) == 1
    (chapter, module, _name), why = next(iter(uses.items()))
    assert (chapter, module) == ("01_early", "nanoserve.later") and "02_later" in why
    assert tool.static_checks() == 1
    assert "01_early.ipynb: exported cell" in capsys.readouterr().out


def test_a_backward_reference_passes_static(tmp_path, capsys):
    numbers_chapter(tmp_path, [("code", "#| default_exp early", ""),
                               ("code", "#| export\ndef helper():\n    return 1", "")], name="01_early.ipynb")
    numbers_chapter(tmp_path, [("code", "#| default_exp later", ""),
                               ("code", "#| export\nfrom nanoserve.early import helper\n\ndef g():\n    return helper()",
                                "")], name="02_later.ipynb")
    tool = load_tool(tmp_path)
    assert tool.later_name_uses() == {}
    assert tool.static_checks() == 0, capsys.readouterr().out


def test_a_known_forward_reference_is_allowed_and_a_new_name_is_not(tmp_path):
    two_chapters(tmp_path, "#| export\nfrom nanoserve.later import helper")
    tool = load_tool(tmp_path)
    tool.KNOWN_LATER_NAMES = {("01_early", "nanoserve.later"): {"helper"}}
    assert tool.static_checks() == 0
    tool.KNOWN_LATER_NAMES = {("01_early", "nanoserve.later"): {"other"}}
    assert tool.static_checks() == 1


def test_the_real_chapters_use_no_later_name_beyond_the_known_list():
    tool = load_tool(REPO)
    allowed = {(c, m, n) for (c, m), names in tool.KNOWN_LATER_NAMES.items() for n in names}
    new = {k: v for k, v in tool.later_name_uses().items() if k not in allowed}
    assert not new, "\n".join(new.values())


def test_static_fails_when_the_spine_is_over_its_line_budget(tmp_path, capsys):
    numbers_chapter(tmp_path, [("code", "#| default_exp early", ""),
                               ("code", "#| export\ndef helper():\n\n    return 1", "")], name="05_spine.ipynb")
    numbers_chapter(tmp_path, [("code", "#| default_exp later", ""),
                               ("code", "#| export\ndef other():\n    return 2", "")], name="11_later.ipynb")
    tool = load_tool(tmp_path)
    assert tool.spine_lines() == {"05_spine": 2}  # non-blank exported lines, spine chapters only
    tool.SPINE_TARGET = 2
    assert tool.static_checks() == 0  # at the budget: fine
    assert "spine chapters export 2 non-blank lines (budget <= 2" in capsys.readouterr().out
    tool.SPINE_TARGET = 1
    assert tool.static_checks() == 1
    assert "the spine is over its line budget" in capsys.readouterr().out
