"""The selector's table: which executor and core each configuration gets (appendix A2), checked on a CPU."""
from types import SimpleNamespace

import pytest
import torch

from nanoserve.engine.async_core import AsyncEngineCore
from nanoserve.engine.core import EngineCore
from nanoserve.engine.cuda_graph import CudaGraphModelRunner, FusedEagerModelRunner
from nanoserve.engine.model_runner import ModelRunner
from nanoserve.engine.async_runner import AsyncModelRunner
from nanoserve.engine.selector import core_class, executor_class
from nanoserve.parallel.executor import TensorParallelExecutor

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
BASE = SimpleNamespace(tensor_parallel_size=1, device=CPU, enforce_eager=False, async_scheduling=False)


@pytest.mark.parametrize("change, executor, core", [
    (dict(tensor_parallel_size=2), TensorParallelExecutor, EngineCore),
    (dict(device=CUDA, async_scheduling=True), AsyncModelRunner, AsyncEngineCore),
    (dict(device=CUDA), CudaGraphModelRunner, EngineCore),
    (dict(device=CUDA, enforce_eager=True, async_scheduling=True), FusedEagerModelRunner, AsyncEngineCore),
    (dict(device=CUDA, enforce_eager=True), FusedEagerModelRunner, EngineCore),
    (dict(), ModelRunner, EngineCore),
    (dict(enforce_eager=True), ModelRunner, EngineCore),
])
def test_selector_table(change, executor, core):
    config = SimpleNamespace(**{**vars(BASE), **change})
    assert executor_class(config) is executor
    assert core_class(config) is core


def test_fused_eager_runner_never_captures():
    assert issubclass(FusedEagerModelRunner, CudaGraphModelRunner)
    assert FusedEagerModelRunner.init_kv_cache is not CudaGraphModelRunner.init_kv_cache


def test_async_core_schedules_with_its_scheduler_class():
    from nanoserve.engine.async_scheduler import AsyncScheduler
    from nanoserve.engine.scheduler import Scheduler

    assert EngineCore.scheduler_class is Scheduler and AsyncEngineCore.scheduler_class is AsyncScheduler
