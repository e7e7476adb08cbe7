"""Checkers for chapter 01's exercises (Qwen3 from scratch): RMSNorm, rotary embeddings, GQA attention."""
import torch

from nanoserve.model.layers import RMSNorm, RotaryEmbedding
from nanoserve.model.qwen3 import uncached_causal_attention


def check_rms_norm(rms_norm) -> str:
    """01.1: rms_norm(x, weight, eps) must equal RMSNorm, bit for bit in bfloat16 too."""
    gen = torch.Generator().manual_seed(1)
    x, w = 3 + torch.randn(4, 32, generator=gen), 1 + 0.1 * torch.randn(32, generator=gen)
    ref = RMSNorm(32, eps=1e-6)
    with torch.no_grad():
        ref.weight.copy_(w)
        got = rms_norm(x, w, 1e-6)
        assert got.shape == x.shape, f"hint: the output keeps the input's shape {tuple(x.shape)}, got {tuple(got.shape)}"
        assert torch.allclose(got, ref(x), atol=1e-5), \
            "hint: divide by sqrt(mean(x**2) + eps) over the last dimension; no mean is subtracted (that is LayerNorm)"
        xb, refb = x.bfloat16(), ref.bfloat16()
        gotb = rms_norm(xb, refb.weight, 1e-6)
        assert gotb.dtype == torch.bfloat16, "hint: return the input's dtype"
        assert torch.equal(gotb, refb(xb)), \
            "hint: take the statistics in float32 and cast back to the input dtype before multiplying by the gain"
    return "same as RMSNorm in float32 and, bit for bit, in bfloat16"


def check_apply_rope(apply_rope) -> str:
    """01.2: apply_rope(x, positions, theta) must rotate like RotaryEmbedding (rotate-half pairing)."""
    gen = torch.Generator().manual_seed(2)
    x, positions = torch.randn(5, 3, 16, generator=gen), torch.tensor([0, 1, 7, 100, 3])
    want, _ = RotaryEmbedding(16, 128, 10000.0)(positions, x, x[:, :1])
    got = apply_rope(x, positions, 10000.0)
    assert got.shape == x.shape, f"hint: the output keeps the shape {tuple(x.shape)}"
    assert torch.allclose(got[:1], x[:1], atol=1e-6), "hint: position 0 is a rotation by angle 0 (nothing changes)"
    assert torch.allclose(got, want, atol=1e-5), \
        "hint: Qwen3 pairs channel i with channel i + d/2 (rotate-half), not neighbouring channels 2i and 2i+1"
    return "rotates exactly like RotaryEmbedding"


def check_gqa_attention(gqa_attention) -> str:
    """01.3: gqa_attention(q, k, v, scale) must equal uncached_causal_attention for grouped heads."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(6, h, 8, generator=gen) for h in (4, 2, 2))
    got = gqa_attention(q, k, v, 8 ** -0.5)
    assert got.shape == q.shape, f"hint: one output per query head: shape {tuple(q.shape)}"
    assert torch.allclose(got, uncached_causal_attention(q, k, v, 8 ** -0.5), atol=1e-5), \
        "hint: query head h reads kv head h // (Hq // Hkv) (neighbouring query heads share one), and the mask is causal"
    return "same as uncached_causal_attention on 4 query heads over 2 kv heads"


CHECKS = {"01.1": check_rms_norm, "01.2": check_apply_rope, "01.3": check_gqa_attention}
