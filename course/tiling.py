"""FlashAttention's idea for teaching (chapter 08): tiled attention with an online softmax, and its pieces.

Hand-written teaching aid, not part of the engine: the chapter builds the same loop step by step, the
tests and the exercise checkers import it from here.
"""
import math

import torch

__all__ = ["tiled_attention", "tiles_visited", "attention_partial", "kv_bytes_read"]


def _check_shapes(q, k, v) -> None:
    """Raise ValueError unless q [.., Tq, D] and k, v [.., Tk, D] fit together."""
    if q.shape[-1] != k.shape[-1] or k.shape != v.shape:
        raise ValueError(f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")


def tiled_attention(q, k, v, block_size=64, causal=True, scale=None):
    """Attention over key blocks with an online softmax; q [H, Tq, D], k/v [H, Tk, D] -> [H, Tq, D]."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    _check_shapes(q, k, v)
    tq, tk = q.shape[-2], k.shape[-2]
    if causal and tq > tk:
        raise ValueError(f"causal attention needs at least as many keys as queries ({tq} > {tk})")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qf = q.float() * scale
    q_pos = torch.arange(tq) + (tk - tq)
    m = torch.full((*q.shape[:-1], 1), float("-inf"))
    l = torch.zeros(*q.shape[:-1], 1)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1])
    for start in range(0, tk, block_size):
        if causal and start > q_pos[-1]:
            break  # this block and all later ones lie in every query's future
        kb = k[..., start:start + block_size, :].float()
        vb = v[..., start:start + block_size, :].float()
        s = qf @ kb.transpose(-1, -2)
        if causal:
            k_pos = torch.arange(start, start + kb.shape[-2])
            s = s.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows fully masked so far
        p = torch.exp(s - m_safe)
        rescale = torch.exp(m - m_safe)
        l = l * rescale + p.sum(-1, keepdim=True)
        acc = acc * rescale + p @ vb
        m = m_new
    return (acc / l).to(q.dtype)


def attention_partial(q, k, v, scale=None):
    """Non-causal attention of q over one share of the keys, unnormalised: (m, l, acc), as one split-KV block keeps."""
    _check_shapes(q, k, v)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q.float() * scale) @ k.float().transpose(-1, -2)
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - m)
    return m, p.sum(-1, keepdim=True), p @ v.float()


def tiles_visited(num_queries, num_keys, q_block, k_block, causal=True):
    """Boolean grid [q tiles, k tiles]: which score tiles a causal tiled kernel computes."""
    q_pos = torch.arange(num_queries) + (num_keys - num_queries)
    grid = torch.zeros(math.ceil(num_queries / q_block), math.ceil(num_keys / k_block), dtype=torch.bool)
    for i in range(grid.shape[0]):
        last_q = q_pos[min((i + 1) * q_block, num_queries) - 1]
        for j in range(grid.shape[1]):
            grid[i, j] = (not causal) or j * k_block <= last_q
    return grid


def kv_bytes_read(num_tokens, q_block, k_block, kv_bytes_per_token):
    """Bytes of K and V a causal prefill kernel reads when every query tile streams its key tiles once."""
    grid = tiles_visited(num_tokens, num_tokens, q_block, k_block)
    tokens = 0
    for j in range(grid.shape[1]):  # the last key tile may be short
        tokens += int(grid[:, j].sum()) * (min((j + 1) * k_block, num_tokens) - j * k_block)
    return tokens * kv_bytes_per_token
