"""Shared helpers for the gloo tensor-parallel tests: tiny checkpoints and process liveness."""
import os
import time

import pytest


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def wait_gone(pids, timeout_s: float = 10.0) -> list:
    """Pids still alive after waiting up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    """A tiny float32 Qwen3 checkpoint whose head counts split over 2 ranks (4 q heads, 2 kv heads)."""
    from nanoserve.model.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tp_tiny"), seed=0)


@pytest.fixture(scope="session")
def tiny_ckpt_one_kv(tmp_path_factory):
    """A tiny checkpoint with a single kv head, so TP=2 must replicate it."""
    from nanoserve.model.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tp_tiny_kv1"), seed=1, num_key_value_heads=1,
                                tie_word_embeddings=False, vocab_size=509)


@pytest.fixture
def gone():
    """`gone(pids, timeout_s)` -> the pids still alive after waiting (empty when all exited)."""
    return wait_gone


@pytest.fixture
def alive():
    """`alive(pid)` -> whether the process runs."""
    return pid_alive
