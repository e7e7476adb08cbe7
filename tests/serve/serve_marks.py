"""Skip markers the serving tests share."""
import pytest


def has_structured_outputs() -> bool:
    """True when the engine has structured decoding (chapter 17's module and the grammar library it needs)."""
    try:
        import llguidance  # noqa: F401

        from nanoserve.structured import StructuredOutputsParams  # noqa: F401
    except ImportError:
        return False
    return True


needs_structured = pytest.mark.skipif(not has_structured_outputs(), reason="the engine has no structured decoding")
