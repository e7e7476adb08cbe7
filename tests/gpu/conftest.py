"""GPU tests import their shared batch builders from this folder."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_report_header(config):
    """Name the attention backend 'auto' picks here: the GPU suite runs once per backend on offer."""
    try:
        from nanoserve.engine.selector import attention_backends

        return f"attention backend 'auto' picks here: {next(iter(attention_backends()))}"
    except Exception as error:  # a header must never stop the run
        return f"attention backend: unknown ({error})"
