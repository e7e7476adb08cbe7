"""Skip GPU work on machines that lack it: nbval cells tagged gpu/multigpu and tests marked so."""
import pytest

NEEDS = {"gpu": 1, "multigpu": 2}  # tag or marker -> CUDA devices required


def cuda_device_count() -> int:
    """Number of usable CUDA devices (0 when torch or CUDA is missing)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def requirements_of(item) -> set:
    """gpu/multigpu requirements of a test item: nbval cell tags or pytest markers."""
    cell = getattr(item, "cell", None)
    if cell is not None:  # nbval's IPyNbCell keeps the notebook cell it runs
        tags = cell.get("metadata", {}).get("tags", [])
        found = set(tags) if isinstance(tags, list) else set()
    else:
        found = set()
    found |= {m.name for m in item.iter_markers() if m.name in NEEDS}
    return found & set(NEEDS)


def pytest_collection_modifyitems(config, items):
    devices = cuda_device_count()
    for item in items:
        for need in requirements_of(item):
            if devices < NEEDS[need]:
                item.add_marker(pytest.mark.skip(
                    reason=f"needs {NEEDS[need]} CUDA device(s), found {devices}"))
