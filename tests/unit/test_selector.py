"""The selector's table: which executor and core each configuration gets (appendix A2), checked on a CPU."""
from types import SimpleNamespace

import pytest
import torch

import nanoserve.parallel.executor as tp  # imported before any patch: it binds build_runner
from nanoserve.engine import selector
from nanoserve.engine.async_core import AsyncEngineCore
from nanoserve.engine.async_core import AsyncScheduler
from nanoserve.engine.core import EngineCore
from nanoserve.engine.graph_runner import GraphRunner
from nanoserve.engine.scheduler import Scheduler

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture
def stand_ins(monkeypatch):
    """build_executor's parts replaced: a runner that loads nothing, no graph variants."""
    monkeypatch.setattr(selector, "build_runner", lambda c, m: SimpleNamespace(device=c.device, backend=None,
                                                                                 model=None))
    monkeypatch.setattr(selector, "graph_variants", lambda c, b: [])


@pytest.mark.parametrize("change, executor", [
    (dict(tensor_parallel_size=2), "tp"),
    (dict(device=CUDA), "graphs"),
    (dict(device=CUDA, enforce_eager=True), "runner"),
    (dict(), "runner"),
    (dict(enforce_eager=True), "runner"),
])
def test_executor_table(monkeypatch, stand_ins, change, executor):
    """The runner alone, a GraphRunner over it, or the TP executor (stand-ins: nothing is loaded)."""
    config = SimpleNamespace(**{**dict(tensor_parallel_size=1, device=CPU, enforce_eager=False,
                                       speculative_config=None, fused_kernels=False), **change})
    monkeypatch.setattr(tp, "TensorParallelExecutor", lambda c, m: "tp")
    got = selector.build_executor(config, None)
    kind = "tp" if got == "tp" else "graphs" if isinstance(got, GraphRunner) else "runner"
    assert kind == executor


def test_fused_kernels_on_needs_the_flag_cuda_and_triton(monkeypatch):
    from nanoserve.kernels import fused

    on, off = SimpleNamespace(fused_kernels=True), SimpleNamespace(fused_kernels=False)
    monkeypatch.setattr(fused, "fused_kernels_available", lambda: True)
    assert selector.fused_kernels_on(on, CUDA)
    assert not selector.fused_kernels_on(on, CPU) and not selector.fused_kernels_on(off, CUDA)
    monkeypatch.setattr(fused, "fused_kernels_available", lambda: False)
    assert not selector.fused_kernels_on(on, CUDA)


@pytest.mark.parametrize("fused", [True, False])
def test_head_graphs_sample_in_one_pass_when_the_layers_are_fused(monkeypatch, stand_ins, fused):
    """Chapter 10's sampler goes into the graph runner by the rule that fuses the layers."""
    from nanoserve.engine.cuda_graphs import graph_sample
    from nanoserve.kernels import fused as fused_module
    from nanoserve.kernels.sampling import sample_rows

    config = SimpleNamespace(tensor_parallel_size=1, device=CUDA, enforce_eager=False, speculative_config=None,
                             fused_kernels=fused)
    monkeypatch.setattr(fused_module, "fused_kernels_available", lambda: True)
    assert selector.build_executor(config, None).head_sampler is (sample_rows if fused else graph_sample)


@pytest.mark.parametrize("overlap, core", [(True, AsyncEngineCore), (False, EngineCore)])
def test_core_table(overlap, core):
    assert selector.core_class(SimpleNamespace(async_scheduling=overlap, speculative_config=None)) is core


def test_speculation_gets_its_core_and_refuses_tensor_parallelism():
    from nanoserve.engine.spec_decode import OverlappedSpecDecodeCore, SpecDecodeCore, SpeculativeConfig

    spec = SpeculativeConfig(num_speculative_tokens=3)
    config = SimpleNamespace(tensor_parallel_size=1, device=CPU, enforce_eager=False, async_scheduling=False,
                             speculative_config=spec)
    assert selector.core_class(config) is SpecDecodeCore
    assert selector.core_class(SimpleNamespace(**{**vars(config), "async_scheduling": True})) is OverlappedSpecDecodeCore
    with pytest.raises(ValueError, match="speculative_config needs tensor_parallel_size=1"):
        selector.core_class(SimpleNamespace(**{**vars(config), "tensor_parallel_size": 2}))


def test_async_core_schedules_with_its_scheduler_class():
    assert EngineCore.scheduler_class is Scheduler and AsyncEngineCore.scheduler_class is AsyncScheduler


def test_launch_only_compiles_inside_compile_only():
    from nanoserve.kernels.fused import compile_only, launch

    class Kernel:
        def __init__(self):
            self.calls = []

        def __getitem__(self, grid):
            return lambda *args, **constexprs: self.calls.append(("launch", grid, args, constexprs))

        def warmup(self, *args, grid, **constexprs):
            self.calls.append(("compile", grid, args, constexprs))

    kernel = Kernel()
    launch(kernel, (3,), 1, 2, BLOCK=64)
    with compile_only():
        launch(kernel, (3,), 1, 2, BLOCK=64)
    launch(kernel, (4,), 5, BLOCK=32)
    assert kernel.calls == [("launch", (3,), (1, 2), {"BLOCK": 64}), ("compile", (3,), (1, 2), {"BLOCK": 64}),
                            ("launch", (4,), (5,), {"BLOCK": 32})]


def test_scratch_logits_leave_the_runner_as_they_found_it(tmp_path):
    from nanoserve.engine.config import EngineConfig
    from nanoserve.model.loader import load_config
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path, seed=1)
    model_config = load_config(path)
    config = EngineConfig(str(path), device="cpu", num_kv_blocks=8, block_size=4).resolve(model_config)
    runner = selector.build_runner(config, model_config)
    runner.init_kv_cache(8)
    caches, eager = runner.kv_caches, runner.num_eager_steps
    before = runner.kv_cache.clone()
    logits = selector.scratch_logits(runner, [17, 3], 2)
    assert logits.shape == (2, model_config.vocab_size) and torch.isfinite(logits).all()
    assert runner.kv_caches is caches and runner.num_eager_steps == eager and torch.equal(runner.kv_cache, before)
