"""Teaching aid: an AttentionBatch from plain Python lists, for chapters 03 and 08, tests and GPU checks.

The engine never calls it: its model runner (chapter 07) builds each step's batch from the scheduler's output.
"""
import torch

from nanoserve.attention.batch import AttentionBatch


def slots_for(block_table, start, end, block_size):
    """Cache slots of token positions start..end-1 of a sequence with this block table."""
    if not 0 <= start <= end or end > len(block_table) * block_size:
        raise ValueError(f"positions [{start}, {end}) do not fit {len(block_table)} blocks of {block_size}")
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def build_attention_batch(block_tables, context_lens, query_lens, block_size, kv_caches, backend,
                          device="cpu"):
    """An AttentionBatch for sequences whose last query_lens[b] of context_lens[b] tokens are new."""
    if not len(block_tables) == len(context_lens) == len(query_lens):
        raise ValueError("block_tables, context_lens and query_lens must have the same length")
    slots = []
    for table, ctx, q in zip(block_tables, context_lens, query_lens):
        if not 0 <= q <= ctx:
            raise ValueError(f"need 0 <= query_len <= context_len, got {q} and {ctx}")
        slots += slots_for(table, ctx - q, ctx, block_size)
    max_blocks = max([len(t) for t in block_tables] + [1])
    tables = torch.full((len(block_tables), max_blocks), -1, dtype=torch.int32)
    for b, table in enumerate(block_tables):
        tables[b, : len(table)] = torch.tensor(table, dtype=torch.int32)

    def cumulative(xs):
        return torch.tensor([0] + list(xs), dtype=torch.int32).cumsum(0).to(torch.int32)

    return AttentionBatch(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        cu_seqlens_q=cumulative(query_lens).to(device),
        cu_seqlens_k=cumulative(context_lens).to(device),
        max_seqlen_q=max(query_lens, default=0),
        max_seqlen_k=max(context_lens, default=0),
        context_lens=torch.tensor(list(context_lens), dtype=torch.int32, device=device),
        block_tables=tables.to(device),
        kv_caches=kv_caches,
        backend=backend,
        is_decode=len(query_lens) > 0 and all(q == 1 for q in query_lens),
    )
