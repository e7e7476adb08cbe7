"""Skip tests marked gpu/multigpu on machines that lack the GPUs; run chapters as Jupyter does."""
import pytest

from course.recordings import cuda_device_count

NEEDS = {"gpu": 1, "multigpu": 2}  # tag or marker -> CUDA devices required


def requirements_of(item) -> set:
    """gpu/multigpu markers of a test (chapter GPU cells replay their recordings instead of being skipped)."""
    return {m.name for m in item.iter_markers() if m.name in NEEDS}


def execute_like_jupyter(self, cell_input, allow_stdin=None):
    """Run a cell with history on, as Jupyter and nbclient do (IPython's trailing-`;` rule reads it)."""
    return self.kc.execute(cell_input, store_history=True, allow_stdin=allow_stdin, stop_on_error=False)


def pytest_configure(config):
    # nbval executes with store_history=False, so `plot(...);` would show its value under nbval
    # but not in the committed notebook; run cells the way the notebooks were produced instead
    try:
        from nbval.kernel import RunningKernel
    except ImportError:
        return
    RunningKernel.execute_cell_input = execute_like_jupyter


def pytest_collection_modifyitems(config, items):
    devices = cuda_device_count()
    for item in items:
        for need in requirements_of(item):
            if devices < NEEDS[need]:
                item.add_marker(pytest.mark.skip(
                    reason=f"needs {NEEDS[need]} CUDA device(s), found {devices}"))
