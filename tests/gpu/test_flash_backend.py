"""Flash backend and Triton KV store against the torch reference, on real-shaped paged batches (CUDA only)."""
import pytest
import torch

from course.paged_batch import SCENARIOS, paged_case, scenario

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", params=["flash", "flash4"])
def backends(request):
    """(torch reference, a flash backend): flash-attn 2's, then flash-attn-4's where it is installed."""
    pytest.importorskip("flash_attn")
    from nanoserve.attention.flash import FlashAttentionBackend
    from nanoserve.attention.flash4 import Flash4AttentionBackend, flash4_available
    from nanoserve.attention.torch_ref import TorchAttentionBackend

    if request.param == "flash4" and not flash4_available():
        pytest.skip("flash-attn-4 is not installed, or this GPU is older than Hopper")
    return TorchAttentionBackend(), (Flash4AttentionBackend if request.param == "flash4" else FlashAttentionBackend)()


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.parametrize("head_dim", [64, 128])
def test_flash_matches_torch(backends, name, head_dim):
    specs, shared = scenario(name, 256)
    outs, caches = [], []
    for backend in backends:
        q, k, v, batch = paged_case(specs, backend, head_dim=head_dim, shared_prefix_blocks=shared)
        outs.append(backend.forward(q, k, v, 0, batch))
        caches.append(batch.kv_caches[0])
    assert batch.is_decode == (name == "decode")
    torch.testing.assert_close(outs[1], outs[0], atol=2e-2, rtol=2e-2)
    assert torch.equal(caches[0][0], caches[1][0]) and torch.equal(caches[0][1], caches[1][1])


def test_triton_store_is_exact_and_skips_padding():
    from nanoserve.attention.batch import allocate_kv_cache
    from nanoserve.attention.flash import store_kv_triton
    from nanoserve.attention.torch_ref import store_kv

    pytest.importorskip("triton")
    n = 3000
    _, a = allocate_kv_cache(1, 32, 256, 8, 128, dtype=torch.bfloat16, device="cuda")
    _, b = allocate_kv_cache(1, 32, 256, 8, 128, dtype=torch.bfloat16, device="cuda")
    qkv = torch.randn(n, 4096, device="cuda", dtype=torch.bfloat16)
    k, v = qkv[:, 2048:3072].view(n, 8, 128), qkv[:, 3072:].view(n, 8, 128)  # strided, like the model's
    slots = torch.randperm(32 * 256, device="cuda")[:n]
    slots[::3] = -1
    store_kv_triton(k, v, *a[0], slots)
    store_kv(k, v, *b[0], slots)
    assert torch.equal(a[0][0], b[0][0]) and torch.equal(a[0][1], b[0][1])
    written = torch.zeros(32 * 256, dtype=torch.bool, device="cuda")
    written[slots[slots >= 0]] = True
    assert not a[0][0].view(-1, 8, 128)[~written].any()


def test_flash_rejects_bad_block_size_and_dtype(backends):
    flash = backends[1]
    q, k, v, batch = paged_case([(0, 8)], flash, block_size=16)
    with pytest.raises(ValueError, match="multiple of 256"):
        flash.forward(q, k, v, 0, batch)
    q, k, v, batch = paged_case([(0, 8)], flash, dtype=torch.float32)
    with pytest.raises(TypeError, match="bfloat16"):
        flash.forward(q, k, v, 0, batch)
