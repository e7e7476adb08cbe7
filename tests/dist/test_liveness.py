"""A stalled tensor-parallel worker is a clear, bounded error; workers exit promptly on shutdown."""
import os
import signal
import time

import pytest

from nanoserve.engine.config import EngineConfig
from nanoserve.engine.engine import LLMEngine
from course import faults
from course.tp_timing import shm_step
from nanoserve.parallel.workers import RankPool
from nanoserve.sampling import SamplingParams

TIMEOUT_S = 2.0


def make_engine(path, **kwargs) -> LLMEngine:
    return LLMEngine.from_args(str(path), tensor_parallel_size=2, skip_tokenizer_init=True, dtype="float32",
                               num_kv_blocks=16, block_size=4, **kwargs)


def stop(pid: int):
    os.kill(pid, signal.SIGSTOP)


def forget(pids):
    """Never leave a stopped process behind, whatever the test did."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_stalled_worker_mid_generate_is_a_bounded_clear_error(tiny_ckpt, gone):
    engine = make_engine(tiny_ckpt, tp_worker_timeout_s=TIMEOUT_S)
    pids = engine.executor.worker_pids
    try:
        engine.add_request(None, [1, 2, 3], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))
        engine.step()
        stop(pids[0])
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"worker rank 1 stopped responding .*tp_worker_timeout_s=2"):
            while engine.has_unfinished_requests():
                engine.step()
        elapsed = time.monotonic() - start
        assert elapsed < TIMEOUT_S + 5.0, elapsed
        assert gone(pids, 2.0) == []
        assert not engine.executor.pool.is_open  # torn down: no worker, no shared memory, no store
        engine.shutdown()  # and shutting the engine down afterwards is harmless
    finally:
        forget(pids)


def test_idle_stalled_worker_is_reported_at_the_next_call(gone):
    pool = RankPool(2, worker_timeout_s=1.0)
    pids = pool.worker_pids
    try:
        stop(pids[0])
        time.sleep(2.0)
        assert gone(pids, 1.0) == []  # the watchdog killed it while nobody was calling
        with pytest.raises(RuntimeError, match="worker rank 1 stopped responding"):
            pool.call(shm_step, None)
    finally:
        forget(pids)
        pool.close()


def test_worker_frozen_while_waiting_for_work_does_not_block_rank_0(gone):
    """Waking a frozen worker must not wait for it (a multiprocessing Event's set() would, forever)."""
    pool = RankPool(2, worker_timeout_s=1.0)
    pids = pool.worker_pids
    try:
        pool.call(shm_step, None)
        time.sleep(0.5)  # the worker sleeps in its wait for the next message
        stop(pids[0])
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="worker rank 1 stopped responding"):
            pool.call(shm_step, None)
        assert time.monotonic() - start < 5.0
        assert gone(pids, 1.0) == []
    finally:
        forget(pids)
        pool.close()


def test_busy_worker_is_not_a_stalled_worker():
    """A worker that computes for longer than the timeout keeps beating: the call succeeds."""
    with RankPool(2, worker_timeout_s=0.5) as pool:
        pool.call(faults.stall_on, 1, 1.5, ack=True)
        pool.call(shm_step, None)


def test_workers_exit_within_a_second_of_shutdown(tiny_ckpt, gone):
    engine = make_engine(tiny_ckpt)
    pids = engine.executor.worker_pids
    start = time.monotonic()
    engine.executor.shutdown()
    assert gone(pids, 1.0) == []
    assert time.monotonic() - start < 1.5


@pytest.mark.parametrize("bad", [0, -1.0, "60", True])
def test_bad_worker_timeout_is_rejected(tmp_path, bad):
    with pytest.raises(ValueError, match="tp_worker_timeout_s"):
        EngineConfig(model=str(tmp_path), tp_worker_timeout_s=bad)
    with pytest.raises(ValueError, match="tp_worker_timeout_s"):
        RankPool(2, worker_timeout_s=bad)
