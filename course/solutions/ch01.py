"""Solutions to chapter 01's exercises, typical mistakes the checkers reject, and written answers."""
import torch
import torch.nn.functional as F


def embedding_share(config):
    """Embedding parameters over all the checkpoint's parameters, the tied head counted once."""
    from nanoserve.model.config import ModelConfig
    from nanoserve.model.loader import checkpoint_shapes

    shapes = checkpoint_shapes(ModelConfig.from_dict(config))
    if config.get("tie_word_embeddings"):
        del shapes["lm_head.weight"]
    sizes = {name: torch.Size(shape).numel() for name, shape in shapes.items()}
    return sizes["model.embed_tokens.weight"] / sum(sizes.values())


def embedding_share_counting_the_tied_head(config):
    """Counts a tied head as parameters of its own: the checkpoint does not store it twice."""
    from nanoserve.model.config import ModelConfig
    from nanoserve.model.loader import checkpoint_shapes

    sizes = [torch.Size(s).numel() for s in checkpoint_shapes(ModelConfig.from_dict(config)).values()]
    return config["vocab_size"] * config["hidden_size"] / sum(sizes)


def _angles(positions, dim, theta):
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    return positions.float()[:, None, None] * inv_freq  # [T, 1, D/2]


def apply_rope(x, positions, theta):
    """Rotate-half: channel i pairs with channel i + D/2."""
    angles = _angles(positions, x.shape[-1], theta)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def apply_rope_interleaved(x, positions, theta):
    """GPT-J's layout: channels 2i and 2i+1 form a pair; right for other models, wrong for Qwen3."""
    angles = _angles(positions, x.shape[-1], theta)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * angles.cos() - odd * angles.sin()
    out[..., 1::2] = even * angles.sin() + odd * angles.cos()
    return out


def gqa_attention(q, k, v, scale):
    """PyTorch repeats nothing in memory when told the heads are grouped."""
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                         is_causal=True, scale=scale, enable_gqa=True)
    return out.transpose(0, 1)


def gqa_attention_tiled(q, k, v, scale):
    """`repeat` tiles the kv heads (0, 1, 0, 1): query head h reads kv head h % Hkv instead of h // group."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat(1, group, 1), v.repeat(1, group, 1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                         is_causal=True, scale=scale)
    return out.transpose(0, 1)


SOLUTIONS = {"01.1": embedding_share, "01.2": apply_rope, "01.3": gqa_attention}
WRONG = {"01.1": embedding_share_counting_the_tied_head, "01.2": apply_rope_interleaved, "01.3": gqa_attention_tiled}
EXPLANATIONS = {
    "01.4": (
        "Give the model a mapping entry whose stacked parameter is also the checkpoint's name, e.g. a subclass with\n"
        "packed_modules_mapping = {'gate_up_proj': ['gate_proj', 'up_proj']} only, and let qkv_proj load whole: a\n"
        "checkpoint tensor 'qkv_proj.weight' then maps to itself with shard id None. QKVLinear's weight_loader must\n"
        "accept shard_id None (copy the whole [q+2kv, hidden] tensor), and expected_loads must then expect\n"
        "(qkv_proj.weight, None) instead of the three shards, so a checkpoint holding both layouts, or neither, still\n"
        "fails the exactly-once check. checkpoint_shapes needs the fused name's shape (q_size + 2 kv_size, hidden)."),
    "01.5": (
        "In bfloat16 the logits agree only to about 1e-2 relative (bf16 keeps 8 bits of mantissa), so\n"
        "assert_close(ours, theirs, rtol=2e-2, atol=2e-2) passes while the default tolerances fail. Both models round\n"
        "at the same places, so the argmax agrees on almost every row. Taking RMSNorm's statistics in bfloat16\n"
        "instead of float32 changes results visibly (a sum of 64+ squares loses digits), and so would building RoPE's\n"
        "cos/sin tables in bfloat16 at large positions: angles like 1000 rad lose their fractional part."),
}
