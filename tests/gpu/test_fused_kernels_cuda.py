"""Fused Triton kernels equal chapter 01's torch layers on CUDA (bf16 and fp32), alone and in a Qwen3-0.6B-shaped model."""
import pytest
import torch

from nanoserve.model.layers import RMSNorm, RotaryEmbedding, SiluAndMul

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float32]
QWEN3_06B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                 rope_theta=1000000.0)


def random_bf16_model(shape: dict):
    """A bf16 Qwen3 on CUDA with the given config overrides, matrices N(0, 0.02) and norm gains near 1."""
    from nanoserve.model.qwen3 import Qwen3ForCausalLM
    from nanoserve.model.tiny import tiny_qwen3_config

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(tiny_qwen3_config(**shape)).to(torch.bfloat16)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.02)
            else:
                param.uniform_(0.8, 1.2)
    return model


@pytest.fixture(scope="module")
def fused():
    pytest.importorskip("triton")
    from nanoserve.kernels import fused

    assert fused.fused_kernels_available()
    return fused


def _close(got, want):
    """bf16 results may differ in the last bit (fp32 sum order, rsqrt/exp implementations)."""
    if want.dtype == torch.bfloat16:
        torch.testing.assert_close(got, want, atol=2e-2, rtol=1.6e-2)
    else:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, width", [(1, 1024), (37, 1024), (300, 1000), (5, 128)])
def test_rms_norm(fused, dtype, tokens, width):
    torch.manual_seed(0)
    norm = RMSNorm(width, 1e-6).to("cuda", dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(tokens, width, device="cuda", dtype=dtype) * 3
    residual = torch.randn(tokens, width, device="cuda", dtype=dtype)
    _close(fused.rms_norm(x, norm.weight, norm.eps), norm(x))
    normed, new_residual = fused.rms_norm(x, norm.weight, norm.eps, residual)
    want_normed, want_residual = norm(x, residual)
    assert torch.equal(new_residual, want_residual)  # one rounded add: bit-exact
    _close(normed, want_normed)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 37, 512])
def test_per_head_norm_and_rotary_on_strided_qkv(fused, dtype, tokens):
    torch.manual_seed(1)
    heads, kv_heads, dim = 16, 8, 128
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device="cuda", dtype=dtype)
    q = qkv[:, :heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim:(heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    norm = RMSNorm(dim, 1e-6).to("cuda", dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    _close(fused.rms_norm(q, norm.weight, norm.eps), norm(q))
    _close(fused.rms_norm(k, norm.weight, norm.eps), norm(k))
    rope = RotaryEmbedding(dim, 40960, 1000000.0).to("cuda")
    positions = torch.randint(0, 40960, (tokens,), device="cuda")
    got_q, got_k = fused.rotary(positions, q, k, rope.cos, rope.sin)
    want_q, want_k = rope(positions, q, k)
    _close(got_q, want_q)
    _close(got_k, want_k)
    k_norm = RMSNorm(dim, 1e-6).to("cuda", dtype)
    with torch.no_grad():
        k_norm.weight.uniform_(0.5, 1.5)
    got = fused.rotary(positions, q, k, rope.cos, rope.sin, (norm.weight, k_norm.weight, norm.eps))  # one launch
    for g, w in zip(got, rope(positions, norm(q), k_norm(k))):
        _close(g, w)


@pytest.mark.parametrize("tokens", [1, 8, 300])
def test_kv_store_in_the_rotary_launch_equals_rotary_then_store(fused, tokens):
    from nanoserve.attention.flash import store_kv_triton

    torch.manual_seed(5)
    heads, kv_heads, dim = 16, 8, 128
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device="cuda", dtype=torch.bfloat16)
    q, k, v = (x.unflatten(-1, (-1, dim)) for x in qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], -1))
    rope = RotaryEmbedding(dim, 40960, 1000000.0).to("cuda")
    norms = (torch.rand(dim, device="cuda", dtype=torch.bfloat16) + 0.5,
             torch.rand(dim, device="cuda", dtype=torch.bfloat16) + 0.5, 1e-6)
    positions = torch.randint(0, 40960, (tokens,), device="cuda")
    slots = torch.randperm(4 * 256, device="cuda")[:tokens]
    slots[-1] = -1  # a padding lane
    caches = torch.randn(2, 4, 256, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    want_caches = caches.clone()
    want_q, want_k = fused.rotary(positions, q, k, rope.cos, rope.sin, norms)
    store_kv_triton(want_k, v, want_caches[0], want_caches[1], slots)
    got_q, got_k = fused.rotary(positions, q, k, rope.cos, rope.sin, norms, (v, caches[0], caches[1], slots))
    assert got_k is None and torch.equal(got_q, want_q) and torch.equal(caches, want_caches)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, width", [(1, 3072), (37, 3072), (64, 1000)])
def test_silu_and_mul(fused, dtype, tokens, width):
    torch.manual_seed(2)
    x = torch.randn(tokens, 2 * width, device="cuda", dtype=dtype) * 3
    _close(fused.silu_and_mul(x), SiluAndMul()(x))


def test_fused_model_matches_unfused(fused):
    model = random_bf16_model(QWEN3_06B)
    model.eval()
    ids = torch.randint(0, 151936, (200,), device="cuda")
    positions = torch.cat([torch.arange(150), torch.arange(1000, 1050)]).to("cuda")
    with torch.no_grad():
        want = model.compute_logits(model(ids, positions)).float()
        assert fused.fuse_model(model) == 2 * 6 + 2
        got = model.compute_logits(model(ids, positions)).float()
    assert (got.argmax(-1) == want.argmax(-1)).float().mean().item() >= 0.95
    top2 = want.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 0.05  # rows whose winner is not a near-tie at bf16 precision
    assert torch.equal(got.argmax(-1)[clear], want.argmax(-1)[clear])
    assert (got - want).abs().max().item() < 0.1 * want.abs().max().item()


def test_fused_model_under_cuda_graph(fused):
    model = random_bf16_model({**QWEN3_06B, "vocab_size": 512})
    fused.fuse_model(model)
    ids, positions = torch.randint(0, 512, (8,), device="cuda"), torch.arange(8, device="cuda")
    with torch.no_grad():
        eager = model(ids, positions)  # also compiles the kernels before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = model(ids, positions)
        graph.replay()
    _close(captured, eager)
