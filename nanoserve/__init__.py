"""nanoserve: a small, fast LLM inference engine built chapter by chapter."""
from typing import TYPE_CHECKING

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

_LAZY = {
    "LLM": "nanoserve.llm",
    "SamplingParams": "nanoserve.sampling",
    "RequestOutput": "nanoserve.outputs",
    "CompletionOutput": "nanoserve.outputs",
    "RequestOutputKind": "nanoserve.outputs",
    "TextPrompt": "nanoserve.engine.input_processor",
    "TokensPrompt": "nanoserve.engine.input_processor",
    "LLMEngine": "nanoserve.engine.engine",
    "EngineArgs": "nanoserve.engine.arg_utils",
    "AsyncEngineArgs": "nanoserve.engine.arg_utils",
    "AsyncLLM": "nanoserve.entrypoints.async_engine",
    "FlexibleArgumentParser": "nanoserve.engine.arg_utils",
    "StructuredOutputsParams": "nanoserve.structured",
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # type checkers and IDEs see the real classes; at run time they load on first use
    from nanoserve.engine.arg_utils import AsyncEngineArgs, EngineArgs, FlexibleArgumentParser
    from nanoserve.engine.engine import LLMEngine
    from nanoserve.engine.input_processor import TextPrompt, TokensPrompt
    from nanoserve.entrypoints.async_engine import AsyncLLM
    from nanoserve.llm import LLM
    from nanoserve.outputs import CompletionOutput, RequestOutput, RequestOutputKind
    from nanoserve.sampling import SamplingParams
    from nanoserve.structured import StructuredOutputsParams


def __getattr__(name):
    """Import the public classes on first use so `import nanoserve` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nanoserve' has no attribute {name!r}")


def __dir__():
    """The lazy names too, so `dir(nanoserve)` and tab completion list them before first use."""
    return sorted(set(globals()) | set(_LAZY))
