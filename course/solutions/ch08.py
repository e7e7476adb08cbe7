"""Solutions to chapter 08's exercises (flash attention)."""
import torch

from course.tiling import tiles_visited

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def merge_partials(parts):
    """Rescale every partial to the common maximum, then add and normalise once."""
    m = torch.stack([p[0] for p in parts]).amax(0)
    l = sum(pl * torch.exp(pm - m) for pm, pl, _ in parts)
    acc = sum(pa * torch.exp(pm - m) for pm, _, pa in parts)
    return acc / l


def merge_partials_without_rescaling(parts):
    """A typical mistake: add the partial sums as if every split had the same maximum."""
    return sum(p[2] for p in parts) / sum(p[1] for p in parts)


def kv_bytes_read(num_tokens, q_block, k_block, kv_bytes_per_token):
    """Sum, over the tiles a causal kernel visits, of the key tokens each reads."""
    grid = tiles_visited(num_tokens, num_tokens, q_block, k_block)
    tokens = sum(int(grid[:, j].sum()) * (min((j + 1) * k_block, num_tokens) - j * k_block)
                 for j in range(grid.shape[1]))
    return tokens * kv_bytes_per_token


def kv_bytes_read_dense(num_tokens, q_block, k_block, kv_bytes_per_token):
    """A typical mistake: every query tile reads every key (no causal skipping)."""
    return -(-num_tokens // q_block) * num_tokens * kv_bytes_per_token


def _streamed_decode(q, k_cache, v_cache, batch, trim_last_block: bool):
    """Each sequence's blocks folded one at a time into a running (m, l, acc) per query head."""
    n_seqs, n_heads, head_dim = q.shape
    block_size, n_kv = k_cache.shape[1], k_cache.shape[2]
    group = n_heads // n_kv
    out = torch.zeros_like(q)
    for b in range(n_seqs):
        ctx = int(batch.context_lens[b])
        if ctx == 0:
            continue  # a padding row attends to nothing
        qb = q[b].float().view(n_kv, group, head_dim) * head_dim ** -0.5  # head h = kv head h // group
        m = torch.full((n_kv, group, 1), float("-inf"), device=q.device)
        l = torch.zeros(n_kv, group, 1, device=q.device)
        acc = torch.zeros(n_kv, group, head_dim, device=q.device)
        for i in range(-(-ctx // block_size)):
            block = int(batch.block_tables[b, i])
            rows = min(block_size, ctx - i * block_size) if trim_last_block else block_size
            kb = k_cache[block, :rows].float().transpose(0, 1)  # [Hkv, rows, D]
            vb = v_cache[block, :rows].float().transpose(0, 1)
            s = qb @ kb.transpose(-1, -2)  # [Hkv, group, rows]
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            rescale = torch.exp(m - m_new)
            l = l * rescale + p.sum(-1, keepdim=True)
            acc = acc * rescale + p @ vb
            m = m_new
        out[b] = (acc / l).reshape(n_heads, head_dim).to(q.dtype)
    return out


def fresh_prefill(step) -> bool:
    """No sequence has cached tokens: every context is exactly its new tokens (host tensors, no GPU read)."""
    return torch.equal(step.cu_seqlens_q, step.cu_seqlens_k)


def fresh_prefill_not_decode(step) -> bool:
    """A typical mistake: every step that is not a decode taken for fresh, prefix hits and later chunks included."""
    return not step.is_decode


def paged_decode(q, k_cache, v_cache, batch):
    """Stream each sequence's valid blocks (and the valid rows of its last one) through an online softmax."""
    return _streamed_decode(q, k_cache, v_cache, batch, trim_last_block=True)


def paged_decode_whole_blocks(q, k_cache, v_cache, batch):
    """A typical mistake: attend to every row of the last block, past the end of the context."""
    return _streamed_decode(q, k_cache, v_cache, batch, trim_last_block=False)


SOLUTIONS = {"08.1": merge_partials, "08.2": kv_bytes_read, "08.4": fresh_prefill, "08.5": paged_decode}
WRONG = {"08.1": merge_partials_without_rescaling, "08.2": kv_bytes_read_dense, "08.4": fresh_prefill_not_decode,
         "08.5": paged_decode_whole_blocks}

EXPLANATIONS = {
    "08.3": """An H200: about 990 TFLOP/s dense bf16 and 4.8 TB/s, so the ridge point is ~206 FLOPs per byte.
Causal prefill attention of one 2048-token prompt, per layer, Qwen3-0.6B shape (16 query heads, 8 KV heads,
head dim 128): QK^T and PV are each 2 * 16 * 128 * 2048^2 / 2 FLOPs with the causal half skipped, about
8.6 GFLOPs in all. A flash kernel reads q (2048 * 16 * 128 * 2 bytes), K and V (2 * 2048 * 8 * 128 * 2
bytes) and writes the output (as large as q): about 25 MB. That is ~340 FLOPs per byte, above the ridge:
prefill attention is compute-bound, decode attention (2 FLOPs per byte) is memory-bound. With larger query
tiles the K/V re-reads shrink further (exercise 08.2), so the kernel stays on the compute side.""",
    "08.4": """fresh_prefill(step) is torch.equal(step.cu_seqlens_q, step.cu_seqlens_k): every sequence's context is exactly
its new tokens. Both are CPU tensors that build_step_inputs made from numpy before the model runner copies them
to the GPU, so the test costs no host synchronisation (nano-vllm makes the same test on its Python lists and
passes no block table for a fresh prefill). The model runner could set a flag on AttentionBatch from it, as it
sets is_decode. What that branch would cost is upkeep: a second prefill path in the flash backend, which the
torch reference, the tests and every wrapper that calls the backend's varlen method (chapter 12's mixed steps,
chapter 13's cascade) must agree with, and one more way for a step to differ. What it would gain is nothing
measurable: on the H200 the paged call took 0.12 ms against the dense call's 0.14 ms for a 4,072-token prefill
batch (section 3), although it reads the fresh keys back from the cache. One path is the simpler choice.""",
}
