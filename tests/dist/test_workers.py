"""RankPool lifecycle: coexisting pools, clear errors when a worker fails, and no process left behind."""
import gc
import subprocess
import sys
import textwrap

import pytest

from course import faults
from course import tp_checks as checks
from course.tp_timing import shm_step
from nanoserve.parallel.workers import HANG_DUMP_ENV, RankPool, check_tp_size

DIMS = dict(hidden=16, head_dim=4, n_heads=4, n_kv_heads=2, inter=32, vocab=50, tokens=3)


def test_two_pools_coexist_and_close_cleanly(gone):
    a, b = RankPool(2), RankPool(2)
    try:
        assert a.store_path != b.store_path
        assert max(a.call(checks.layer_parity, DIMS).values()) < 1e-4
        assert max(b.call(checks.layer_parity, DIMS).values()) < 1e-4
    finally:
        pids = a.worker_pids + b.worker_pids
        a.close()
        b.close()
    assert gone(pids, 1.0) == []
    a.close()  # closing twice is harmless


def test_garbage_collected_pool_leaves_no_process(gone, alive):
    pool = RankPool(2)
    pids = pool.worker_pids
    assert all(alive(p) for p in pids)
    del pool
    gc.collect()
    assert gone(pids, 10.0) == []


def test_caller_exception_inside_with_block_cleans_up(gone):
    with pytest.raises(KeyError):
        with RankPool(2) as pool:
            pids = pool.worker_pids
            raise KeyError("caller failed")
    assert gone(pids, 1.0) == []


def test_dead_worker_is_a_clear_error_not_a_hang(gone):
    pool = RankPool(2)
    pids = pool.worker_pids
    with pytest.raises(RuntimeError, match="worker rank 1 exited with code 7"):
        pool.call(faults.crash, 1)
    assert gone(pids, 5.0) == []
    with pytest.raises(RuntimeError, match="closed"):
        pool.call(shm_step, None)


def test_worker_exception_carries_its_traceback(gone):
    pool = RankPool(2)
    with pytest.raises(RuntimeError, match="worker rank 1 failed:(.|\n)*ZeroDivisionError: boom on rank 1"):
        pool.call(faults.raise_on, 1)
    assert gone(pool.worker_pids, 5.0) == []


def test_workers_exit_when_the_caller_is_killed(gone):
    script = textwrap.dedent("""
        import os
        from nanoserve.parallel.workers import RankPool
        pool = RankPool(2)
        print(*pool.worker_pids, flush=True)
        os._exit(3)  # die without any clean-up: no close, no atexit
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 1, out.stderr
    assert gone(pids, 10.0) == []


def test_bad_sizes_are_rejected_before_spawning():
    with pytest.raises(TypeError, match="int"):
        check_tp_size(2.0)
    with pytest.raises(ValueError, match=">= 1"):
        check_tp_size(0)
    with pytest.raises(ValueError, match="CUDA devices"):
        check_tp_size(64, backend="nccl")
    with pytest.raises(ValueError, match="backend"):
        RankPool(2, backend="mpi")


def test_hung_worker_call_dumps_its_stacks_and_exits(gone, monkeypatch, capfd):
    monkeypatch.setenv(HANG_DUMP_ENV, "1")  # read by the workers when they start
    pool = RankPool(2)
    pids = pool.worker_pids
    with pytest.raises(RuntimeError, match="worker rank 1 exited with code 1"):
        pool.call(faults.stall_on, 1, 30.0, ack=True)
    assert gone(pids, 5.0) == []
    err = capfd.readouterr().err
    assert "Timeout" in err and "stall_on" in err  # faulthandler's dump names the stuck function


def test_shared_memory_layout_shows_the_last_message():
    with RankPool(2) as pool:
        pool.call(shm_step, {"ids": [1, 2, 3]})
        layout = pool.shared_memory_layout()
    assert layout["header_bytes"] == 8 and layout["readers"] == [1]
    assert layout["wakeups"] == layout["heartbeat_slots"] == 1
    fn, args, ack = layout["message"]
    assert fn is shm_step and args == ({"ids": [1, 2, 3]},) and ack is False
    assert 0 < layout["message_bytes"] < layout["capacity"]
