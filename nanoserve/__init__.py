"""nanoserve: a small, fast LLM inference engine built chapter by chapter."""

__version__ = "0.1.0"

_LAZY = {
    "LLM": "nanoserve.llm",
    "SamplingParams": "nanoserve.sampling",
    "RequestOutput": "nanoserve.outputs",
    "CompletionOutput": "nanoserve.outputs",
    "LLMEngine": "nanoserve.engine.engine",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    """Import the public classes on first use so `import nanoserve` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nanoserve' has no attribute {name!r}")
