"""Checkers for chapter 01's exercises (Qwen3 from scratch): the embedding's share, rotary embeddings, GQA."""
import torch

from nanoserve.model.layers import RotaryEmbedding
from nanoserve.model.qwen3 import uncached_causal_attention


def _share(config: dict) -> float:
    """The embedding's share of a checkpoint's parameters (a tied head counted once)."""
    from nanoserve.model.config import ModelConfig
    from nanoserve.model.loader import checkpoint_shapes

    shapes = checkpoint_shapes(ModelConfig.from_dict(config))
    if config.get("tie_word_embeddings"):
        shapes.pop("lm_head.weight")
    total = sum(torch.Size(s).numel() for s in shapes.values())
    return torch.Size(shapes["model.embed_tokens.weight"]).numel() / total


def check_embedding_share(embedding_share) -> str:
    """01.1: embedding_share(config) measures the embedding's share of the parameters, for any config."""
    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, tiny_qwen3_config

    tiny = tiny_qwen3_config().to_dict()
    for name, config in (("a tiny tied config", {**tiny, "tie_word_embeddings": True}),
                         ("a tiny untied config", {**tiny, "tie_word_embeddings": False}),
                         ("Qwen3-0.6B", QWEN3_0_6B_CONFIG)):
        got, want = embedding_share(dict(config)), _share(config)
        assert abs(got - want) < 1e-6, (f"hint: on {name} you measured {got:.4f}; count every tensor "
                                         "checkpoint_shapes lists, and the head only when it is not tied")
    share = _share(QWEN3_0_6B_CONFIG)
    return (f"the embedding holds {share:.0%} of Qwen3-0.6B's parameters: compare with your prediction "
            "(at 0.6B parameters the vocabulary is a quarter of the model; at 8B it is a few percent)")


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


CHECKS = {"01.1": check_embedding_share, "01.2": check_apply_rope, "01.3": check_gqa_attention}
