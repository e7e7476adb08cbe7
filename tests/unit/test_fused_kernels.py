"""Fused Triton kernels equal chapter 01's torch layers (Triton's CPU interpreter), the one-pass sampler draws what it
should, and fuse_model keeps the weights.

Triton chooses interpreter or compiler once, at its first import, so the kernel tests run in a child
pytest process started with TRITON_INTERPRET=1; the variable never reaches this process or other tests.
"""
import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from nanoserve.model.layers import RMSNorm, RotaryEmbedding, SiluAndMul

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
HAVE_TRITON = importlib.util.find_spec("triton") is not None
interpreted = pytest.mark.skipif(not (INTERPRETED and HAVE_TRITON),
                                 reason="runs inside test_kernels_under_triton_interpreter's child process")


def test_kernels_under_triton_interpreter():
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
def fused():
    from nanoserve.kernels import fused

    with fused.triton_interpreter():
        yield fused


def _norm(width: int) -> RMSNorm:
    norm = RMSNorm(width)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    return norm


@interpreted
@pytest.mark.parametrize("tokens, width", [(1, 64), (37, 100), (5, 48)])
def test_interp_rms_norm(fused, tokens, width):
    torch.manual_seed(tokens)
    norm, x, residual = _norm(width), torch.randn(tokens, width), torch.randn(tokens, width)
    x_before, residual_before = x.clone(), residual.clone()
    torch.testing.assert_close(fused.rms_norm(x, norm.weight, norm.eps), norm(x))
    normed, new_residual = fused.rms_norm(x, norm.weight, norm.eps, residual)
    want_normed, want_residual = norm(x, residual)
    torch.testing.assert_close(normed, want_normed)
    torch.testing.assert_close(new_residual, want_residual)
    assert torch.equal(x, x_before) and torch.equal(residual, residual_before)  # fresh outputs, inputs kept


@interpreted
@pytest.mark.parametrize("tokens", [1, 37])
def test_interp_per_head_norm_on_strided_qkv(fused, tokens):
    torch.manual_seed(0)
    heads, kv_heads, dim = 6, 2, 24
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim)
    q = qkv[:, :heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim:(heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    norm = _norm(dim)
    torch.testing.assert_close(fused.rms_norm(q, norm.weight, norm.eps), norm(q))
    torch.testing.assert_close(fused.rms_norm(k, norm.weight, norm.eps), norm(k))


@interpreted
@pytest.mark.parametrize("tokens, heads, kv_heads, dim", [(1, 4, 2, 16), (37, 6, 2, 24), (5, 3, 3, 10)])
def test_interp_rotary(fused, tokens, heads, kv_heads, dim):
    torch.manual_seed(1)
    rope = RotaryEmbedding(dim, 256, 10000.0)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim)
    q = qkv[:, :heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim:(heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    positions = torch.randint(0, 256, (tokens,))
    q_before, k_before = q.clone(), k.clone()
    got_q, got_k = fused.rotary(positions, q, k, rope.cos, rope.sin)
    want_q, want_k = rope(positions, q, k)
    torch.testing.assert_close(got_q, want_q)
    torch.testing.assert_close(got_k, want_k)
    assert torch.equal(q, q_before) and torch.equal(k, k_before)


@interpreted
@pytest.mark.parametrize("tokens, heads, kv_heads, dim", [(1, 4, 2, 16), (37, 6, 2, 24)])
def test_interp_qk_norm_in_the_rotary_launch(fused, tokens, heads, kv_heads, dim):
    torch.manual_seed(3)
    rope, q_norm, k_norm = RotaryEmbedding(dim, 256, 10000.0), _norm(dim), _norm(dim)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim)
    q = qkv[:, :heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim:(heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    positions = torch.randint(0, 256, (tokens,))
    got = fused.rotary(positions, q, k, rope.cos, rope.sin, (q_norm.weight, k_norm.weight, q_norm.eps))
    for g, w in zip(got, rope(positions, q_norm(q), k_norm(k))):
        torch.testing.assert_close(g, w)


@interpreted
@pytest.mark.parametrize("tokens, heads, kv_heads, dim, norm", [(1, 4, 2, 16, True), (9, 6, 2, 24, False)])
def test_interp_kv_store_in_the_rotary_launch(fused, tokens, heads, kv_heads, dim, norm):
    from nanoserve.attention.torch_ref import store_kv

    torch.manual_seed(4)
    rope, q_norm, k_norm = RotaryEmbedding(dim, 256, 10000.0), _norm(dim), _norm(dim)
    norms = (q_norm.weight, k_norm.weight, q_norm.eps) if norm else None
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim)  # k and v strided views, as in the model
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], -1)
    q, k, v = q.view(tokens, heads, dim), k.view(tokens, kv_heads, dim), v.view(tokens, kv_heads, dim)
    positions = torch.randint(0, 256, (tokens,))
    slots = torch.randperm(6 * 4)[:tokens]
    slots[0] = -1  # a padding lane writes nowhere
    caches = torch.full((2, 6, 4, kv_heads, dim), 7.0)
    want_caches = caches.clone()
    want_q, want_k = fused.rotary(positions, q, k, rope.cos, rope.sin, norms)
    store_kv(want_k, v, want_caches[0], want_caches[1], slots)
    got_q, got_k = fused.rotary(positions, q, k, rope.cos, rope.sin, norms, (v, caches[0], caches[1], slots))
    assert got_k is None
    assert torch.equal(got_q, want_q) and torch.equal(caches, want_caches)


@interpreted
@pytest.mark.parametrize("tokens, width, block", [(1, 64, 1024), (37, 90, 32), (4, 300, 128)])
def test_interp_silu_and_mul(fused, tokens, width, block):
    torch.manual_seed(2)
    x = torch.randn(tokens, 2 * width)
    torch.testing.assert_close(fused.silu_and_mul(x, block=block), SiluAndMul()(x))


@interpreted
def test_interp_empty_batch(fused):
    norm = _norm(8)
    assert fused.rms_norm(torch.empty(0, 8), norm.weight, norm.eps).shape == (0, 8)
    assert fused.silu_and_mul(torch.empty(0, 8)).shape == (0, 4)


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
    logits[3, 12] = logits[3, 8] = logits[3, 17] = logits[3].max() + 1  # one chunk: the same lane twice, and another
    got = sampling.sample_rows(logits, torch.ones(4), torch.ones(4, dtype=torch.int32))
    assert got.tolist() == logits.argmax(dim=1).tolist() and got[1] == 5 and got[2] == 36 and got[3] == 8
    assert got.dtype == torch.int64


@interpreted
def test_interp_temperature_rows_follow_the_softmax(sampling):
    base, n = torch.tensor([0.0, 1.0, -1.0, 2.0, 0.5]), 400
    greedy = torch.zeros(n, dtype=torch.int32)
    bins = lambda p: torch.stack([p[3], p[1], p[4], p[0] + p[2]])  # noqa: E731  (expected counts of 5 or more)
    want = bins((base / 0.5).softmax(dim=0))
    for t, ok in [(0.5, True), (1.0, False)]:  # the right temperature, and one the expectation does not use
        drawn = sampling.sample_rows(base.repeat(n, 1), torch.full((n,), t), greedy, torch.Generator().manual_seed(3))
        got = bins(torch.bincount(drawn, minlength=5) / n)
        chi2 = float(((got - want) ** 2 / want).sum() * n)
        assert (chi2 < 16.3) == ok, (t, chi2)  # chi-square, 3 degrees of freedom: 16.3 is p = 0.001


@interpreted
def test_interp_sampler_mixes_greedy_and_hot_rows_and_repeats_a_seed(sampling):
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.9], [0.0, 5.0, 1.0, 4.9]])
    greedy = torch.tensor([1, 0], dtype=torch.int32)
    temps = torch.tensor([1.0, 100.0])  # a hot row: almost uniform
    runs = [sampling.sample_rows(logits, temps, greedy, torch.Generator().manual_seed(s)).tolist() for s in range(12)]
    assert all(r[0] == 1 for r in runs)  # the greedy row ignores its noise
    assert len({r[1] for r in runs}) > 1  # the hot row does not
    again = sampling.sample_rows(logits, temps, greedy, torch.Generator().manual_seed(5)).tolist()
    assert again == runs[5]  # same generator state, same draw


@interpreted
@pytest.mark.parametrize("rows, n, k", [(1, 64, 512), (8, 96, 1024), (13, 40, 768)])
def test_interp_split_projection_adds_up_and_its_norm_equals_the_layer(fused, rows, n, k):
    torch.manual_seed(3)
    x, weight, residual, norm = torch.randn(rows, k), torch.randn(n, k) * 0.03, torch.randn(rows, n), _norm(n)
    parts = fused.split_matmul(x, weight, fused.split_count(k))
    assert parts.parts.shape == (fused.split_count(k), rows, n)
    torch.testing.assert_close(parts.total(), x @ weight.T)
    for got, want in zip(parts.rms_norm(norm.weight, norm.eps, residual), norm(x @ weight.T, residual)):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(parts.rms_norm(norm.weight, norm.eps), norm(x @ weight.T))  # no residual: summed first


def test_split_count_picks_the_fewest_slices_of_whole_tiles():
    from nanoserve.kernels.fused import split_count

    assert [split_count(k) for k in (2048, 3072, 1024, 512, 576, 1536, 8192)] == [4, 8, 2, 2, None, 4, None]


def test_split_projections_needs_fused_norms_and_swaps_only_the_row_projections():
    from nanoserve.kernels.fused import PartialSums, SplitRowLinear, fuse_model, split_projections

    model = _tiny_model()
    with pytest.raises(ValueError, match="fuse_model first"):
        split_projections(model)
    ids, positions = torch.randint(0, model.config.vocab_size, (5,)), torch.arange(5)
    with torch.no_grad():
        before = model.compute_logits(model(ids, positions))
        fuse_model(model)
        assert split_projections(model) == 2 * model.config.num_hidden_layers and split_projections(model) == 0
        after = model.compute_logits(model(ids, positions))  # on a CPU the projections return tensors
    assert torch.equal(before, after)
    layer = model.model.layers[0]
    assert type(layer.self_attn.o_proj) is SplitRowLinear and type(layer.mlp.down_proj) is SplitRowLinear
    assert type(layer.self_attn.qkv_proj) is not SplitRowLinear and type(layer.mlp.gate_up_proj) is not SplitRowLinear
    parts = PartialSums(torch.zeros(2, 3, 8), torch.float32)
    with pytest.raises(ValueError, match="must fit partial sums of 3 rows of 8"):
        parts.rms_norm(torch.ones(8), 1e-6, torch.zeros(4, 8))


def test_bad_shapes_raise():
    from nanoserve.kernels.fused import rms_norm, rotary, silu_and_mul

    with pytest.raises(ValueError, match="weight"):
        rms_norm(torch.randn(2, 8), torch.ones(7), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        rms_norm(torch.randn(2, 8), torch.ones(8), 1e-6, torch.randn(3, 8))
    with pytest.raises(ValueError, match="even"):
        silu_and_mul(torch.randn(2, 7))
    rope = RotaryEmbedding(8, 16, 10000.0)
    with pytest.raises(ValueError, match="q \\[T, Hq, D\\]"):
        rotary(torch.arange(2), torch.randn(2, 2, 8), torch.randn(3, 1, 8), rope.cos, rope.sin)
    caches = torch.zeros(2, 3, 4, 1, 8)
    with pytest.raises(ValueError, match="do not fit the contiguous caches"):
        rotary(torch.arange(2), torch.randn(2, 2, 8), torch.randn(2, 1, 8), rope.cos, rope.sin, None,
               (torch.randn(2, 1, 8), caches[0], caches[1], torch.arange(3)))
    with pytest.raises(TypeError, match="share a dtype"):
        rotary(torch.arange(2), torch.randn(2, 2, 8), torch.randn(2, 1, 8), rope.cos, rope.sin, None,
               (torch.randn(2, 1, 8), caches[0].half(), caches[1].half(), torch.arange(2)))
    with pytest.raises(ValueError, match=r"q and k gains must be \[8\], got \(7,\) and \(8,\)"):
        rotary(torch.arange(2), torch.randn(2, 2, 8), torch.randn(2, 1, 8), rope.cos, rope.sin,
               (torch.ones(7), torch.ones(8), 1e-6))


def _tiny_model():
    from nanoserve.model.qwen3 import Qwen3ForCausalLM
    from nanoserve.model.tiny import tiny_qwen3_config

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen3_config(hidden_size=48, head_dim=12))
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.1)
    return model.eval()


def test_fuse_model_swaps_classes_and_keeps_cpu_logits():
    from nanoserve.kernels.fused import (FusedQwen3Attention, FusedRMSNorm, FusedRotaryEmbedding, FusedSiluAndMul,
                                         fuse_model)

    model = _tiny_model()
    ids, positions = torch.randint(0, model.config.vocab_size, (11,)), torch.arange(11)
    state = {name: t.clone() for name, t in model.state_dict().items()}
    with torch.no_grad():
        before = model.compute_logits(model(ids, positions))
        layers = model.config.num_hidden_layers
        assert fuse_model(model) == layers * 6 + 2  # 4 norms + SiLU-mul + attention per layer, final norm, rotary
        after = model.compute_logits(model(ids, positions))
    assert torch.equal(before, after)
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[n], t) for n, t in model.state_dict().items())
    layer = model.model.layers[0]
    assert type(layer.input_layernorm) is FusedRMSNorm and type(layer.self_attn.k_norm) is FusedRMSNorm
    assert type(layer.self_attn.rotary) is FusedRotaryEmbedding and type(layer.mlp.act) is FusedSiluAndMul
    assert type(layer.self_attn) is FusedQwen3Attention
    assert layer.input_layernorm.weight.weight_loader is not None  # loaders survive the swap
    assert fuse_model(model) == 0


def test_fused_kernels_available_is_false_without_cuda():
    from nanoserve.kernels.fused import fused_kernels_available

    if not torch.cuda.is_available():
        assert fused_kernels_available() is False
