"""Chapter 10's one-pass sampler: greedy rows give argmax's tokens, temperature rows follow the softmax (Triton's CPU
interpreter, in a child process as in test_fused_kernels.py); the engine swaps it into the head graphs by one rule."""
import importlib.util
import os
import subprocess
import sys
import types

import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
HAVE_TRITON = importlib.util.find_spec("triton") is not None
interpreted = pytest.mark.skipif(not (INTERPRETED and HAVE_TRITON),
                                 reason="runs inside test_sampler_under_triton_interpreter's child process")


def test_sampler_under_triton_interpreter():
    if not HAVE_TRITON:
        pytest.skip("triton is not installed")
    if INTERPRETED:
        pytest.skip("this is the child process")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    child = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider",
                            "-k", "interp_"], env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    assert " passed" in child.stdout and "skipped" not in child.stdout.split("\n")[-2], child.stdout[-2000:]


@pytest.fixture
def sampling(monkeypatch):
    from nanoserve.kernels import sampling

    monkeypatch.setattr(sampling, "SAMPLE_CHUNK", 8)  # small chunks: the interpreter pays per program
    monkeypatch.setattr(sampling, "SAMPLE_BLOCK", 4)
    return sampling


@interpreted
def test_interp_greedy_rows_are_argmax(sampling):
    torch.manual_seed(0)
    logits = torch.randn(4, 37).to(torch.bfloat16)  # 37 columns: five chunks, the last one partly outside
    logits[1, 5] = logits[1, 30] = logits[1].max() + 1  # equal maxima in two chunks: the first wins
    logits[2, :] = float("-inf")
    logits[2, 36] = 0.0  # the row's only finite logit sits in the last, partial chunk
    got = sampling.sample_rows(logits, torch.ones(4), torch.ones(4, dtype=torch.int32))
    assert got.tolist() == logits.argmax(dim=1).tolist() and got[1] == 5 and got[2] == 36
    assert got.dtype == torch.int64


@interpreted
def test_interp_temperature_rows_follow_the_softmax(sampling):
    base, temperature, n = torch.tensor([0.0, 1.0, -1.0, 2.0, 0.5, -3.0]), 0.8, 300
    drawn = sampling.sample_rows(base.repeat(n, 1), torch.full((n,), temperature), torch.zeros(n, dtype=torch.int32),
                                 torch.Generator().manual_seed(3))
    freq = torch.bincount(drawn, minlength=6) / n
    want = (base / temperature).softmax(dim=0)
    assert float(((freq - want) ** 2 / want).sum() * n) < 20.5  # chi-square, 5 dof: p < 0.001 to fail by chance


@interpreted
def test_interp_mixed_rows_and_seeds(sampling):
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.9], [0.0, 5.0, 1.0, 4.9]])
    greedy = torch.tensor([1, 0], dtype=torch.int32)
    temps = torch.tensor([1.0, 100.0])  # a hot row: almost uniform
    runs = [sampling.sample_rows(logits, temps, greedy, torch.Generator().manual_seed(s)).tolist() for s in range(12)]
    assert all(r[0] == 1 for r in runs)  # the greedy row ignores its noise
    assert len({r[1] for r in runs}) > 1  # the hot row does not
    again = sampling.sample_rows(logits, temps, greedy, torch.Generator().manual_seed(5)).tolist()
    assert again == runs[5]  # same generator state, same draw


def test_the_head_graphs_sample_in_one_kernel_exactly_when_the_layers_are_fused(monkeypatch):
    from nanoserve.engine import selector
    from nanoserve.kernels import fused

    config = types.SimpleNamespace(fused_kernels=True)
    monkeypatch.setattr(fused, "fused_kernels_available", lambda: True)
    assert selector.fused_kernels_on(config, torch.device("cuda"))
    assert not selector.fused_kernels_on(config, torch.device("cpu"))
    assert not selector.fused_kernels_on(types.SimpleNamespace(fused_kernels=False), torch.device("cuda"))
    monkeypatch.setattr(fused, "fused_kernels_available", lambda: False)
    assert not selector.fused_kernels_on(config, torch.device("cuda"))


def test_the_graph_runner_samples_with_graph_sample_until_told_otherwise():
    from nanoserve.engine.cuda_graphs import DecodeGraphRunner, graph_sample

    runner = types.SimpleNamespace(model=None)
    assert DecodeGraphRunner(runner, decode=None).head_sampler is graph_sample
