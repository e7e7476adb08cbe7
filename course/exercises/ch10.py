"""Checkers for chapter 10's exercises (kernel fusion)."""
import collections
import contextlib
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nanoserve.kernels import fused, sampling
from nanoserve.model.qwen3 import Qwen3ForCausalLM
from nanoserve.model.tiny import tiny_qwen3_config

__all__ = ["CHECKS"]


class _Count(TorchDispatchMode):
    """Count the torch operators that launch work (everything but views)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, arg_types, args=(), kwargs=None):
        self.n += not func.is_view
        return func(*args, **(kwargs or {}))


def _fused_layer_count() -> int:
    """Operators one decoder layer of a fused tiny bf16 model runs on this CPU (attention a stand-in)."""
    config = tiny_qwen3_config()
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    fused.fuse_model(model)
    stand_in = types.SimpleNamespace(backend=types.SimpleNamespace(forward=lambda q, k, v, layer, batch: q))
    hidden, residual = torch.randn(2, 3, config.hidden_size, dtype=torch.bfloat16).unbind(0)
    positions = torch.arange(3)
    with torch.no_grad(), _Count() as count:
        model.model.layers[0](positions, hidden, residual, stand_in)
    return count.n


def check_fused_count(prediction) -> str:
    """10.1 (predict, then measure): operators of a fused layer run on the CPU."""
    got, measured = prediction(), _fused_layer_count()
    if got != measured:
        raise AssertionError(f"you predicted {got!r}, the counter measured {measured}: look at what a fused module's "
                             "forward does when its input is not on CUDA")
    return f"measured {measured}: on a CPU the fused modules are the torch layers"


class _Recorder:
    """Stands in for a compiled Triton kernel: records the grid and the compile-time arguments of each launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **meta: self.launches.append((grid, meta))


@contextlib.contextmanager
def _recording(module, builder: str):
    """`module.<builder>()` hands out a recorder instead of the compiled kernel inside the block."""
    recorder, real = _Recorder(), getattr(module, builder)
    setattr(module, builder, lambda: recorder)
    try:
        yield recorder
    finally:
        setattr(module, builder, real)


def _measured_rotary(tokens, q_heads, k_heads, head_dim) -> tuple:
    """(programs, BLOCK_H, masked rows) of one real `rotary` call, its kernel replaced by a recorder."""
    q, k = torch.randn(tokens, q_heads, head_dim), torch.randn(tokens, k_heads, head_dim)
    table = torch.randn(64, head_dim)
    with _recording(fused, "_rotary_kernel") as recorder:
        fused.rotary(torch.zeros(tokens, dtype=torch.int64), q, k, table, table)
    (grid, meta), = recorder.launches
    return grid[0], meta["BLOCK_H"], meta["BLOCK_H"] - q_heads - k_heads


def check_rotary_launch(rotary_launch) -> str:
    """10.2 (predict, then measure): the launch grid and tile of one rotary call."""
    for case in [(7, 16, 8, 128), (1, 6, 2, 24), (37, 32, 4, 64), (3, 3, 3, 16), (5, 8, 8, 128)]:
        want, got = _measured_rotary(*case), rotary_launch(*case)
        if not isinstance(got, tuple) or tuple(got) != want:
            raise AssertionError(f"rotary_launch{case} = {got!r}, measured (programs, BLOCK_H, masked rows) {want}: "
                                 "read the grid and the BLOCK_H argument where `rotary` launches its kernel")
    _, block_h, masked = _measured_rotary(1, 16, 8, 128)
    return f"Qwen3-0.6B masks {masked} of {block_h} tile rows ({masked / block_h:.0%})"


def _measured_sample_launch(rows, vocab) -> tuple:
    """(grid, masked columns of the last chunk) of one real `sample_rows` call, its kernel replaced by a recorder."""
    with _recording(sampling, "_sample_kernel") as recorder:
        sampling.sample_rows(torch.zeros(rows, vocab), torch.ones(rows), torch.zeros(rows, dtype=torch.int32))
    (grid, meta), = recorder.launches
    return tuple(grid), grid[1] * meta["CHUNK"] - vocab


def check_sample_launch(sample_launch) -> str:
    """10.4 (predict, then measure): the grid of one sample_rows call and the masked columns of each row's last chunk."""
    for case in [(1, 151936), (256, 151936), (7, 49152), (3, 8192), (2, 100)]:
        want, got = _measured_sample_launch(*case), sample_launch(*case)
        if not isinstance(got, tuple) or len(got) != 2 or (tuple(got[0]), got[1]) != want:
            raise AssertionError(f"sample_launch{case} = {got!r}, measured (grid, masked columns) {want}: read the grid "
                                 "where `sample_rows` launches its kernel, and SAMPLE_CHUNK")
    (rows, chunks), masked = _measured_sample_launch(256, 151936)
    return (f"Qwen3 at 256 rows: {rows * chunks:,} programs, {masked:,} of each row's {chunks * sampling.SAMPLE_CHUNK:,} "
            f"columns masked ({masked / (chunks * sampling.SAMPLE_CHUNK):.1%})")


def _measured_split_launch(rows, n, k) -> tuple:
    """(grid, BLOCK_M, padded rows) of one real `split_matmul` call, its kernel replaced by a recorder."""
    with _recording(fused, "_split_matmul_kernel") as recorder:
        fused.split_matmul(torch.zeros(rows, k), torch.zeros(n, k), fused.split_count(k))
    (grid, meta), = recorder.launches
    return tuple(grid), meta["BLOCK_M"], meta["BLOCK_M"] - rows


def check_split_launch(split_launch) -> str:
    """10.5 (predict, then measure): the grid and row tile of one split_matmul call at split_count's slices."""
    for case in [(8, 1024, 3072), (1, 1024, 2048), (16, 1024, 2048), (5, 100, 1024), (3, 576, 1536)]:
        want, got = _measured_split_launch(*case), split_launch(*case)
        if not isinstance(got, tuple) or len(got) != 3 or (tuple(got[0]), got[1], got[2]) != want:
            raise AssertionError(f"split_launch{case} = {got!r}, measured (grid, BLOCK_M, padded rows) {want}: read "
                                 "where `split_matmul` launches its kernel, SPLIT_TILE and split_count")
    (columns, slices), block_m, padded = _measured_split_launch(8, 1024, 3072)
    return (f"Qwen3-0.6B's down at 8 rows: {columns * slices} programs ({columns} column tiles x {slices} slices of K), "
            f"{padded} of each tile's {block_m} rows padding")


CHECKS = {"10.1": check_fused_count, "10.2": check_rotary_launch, "10.4": check_sample_launch,
          "10.5": check_split_launch}
