"""Teaching aid: an AttentionBatch from plain Python lists, and random paged batches at real scale, for chapters 03,
08 and 19, tests and GPU checks.

The engine never calls it: its model runner (chapter 07) builds each step's batch from the scheduler's output.
"""
import torch

from nanoserve.attention.batch import AttentionBatch, allocate_kv_cache


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


# random paged batches: name -> (sequences as (cached, new) in block sizes, shared prefix blocks)
SCENARIOS = {
    "prefill": ([(0, 3.5), (0, 1), (0, 0.25)], 0),
    "chunked_prefill": ([(2, 1.5), (1, 0.5), (0, 2)], 0),
    "prefix_hits": ([(2, 0.75), (2, 1.25), (3, 0.5)], 2),
    "mixed": ([(1.5, 0), (0, 1.25), (2, 0.5), (0.5, 0)], 0),
    "decode": ([(0.5, 0), (3, 0), (1.25, 0), (2, 0), (0.01, 0), (7, 0)], 0),
}


def scenario(name, block_size):
    """(specs in tokens as (cached, new), shared prefix blocks); a 0 in 'new' becomes one token."""
    specs, shared = SCENARIOS[name]
    return [(int(c * block_size), max(1, int(n * block_size))) for c, n in specs], shared


def paged_case(specs, backend, block_size=256, n_heads=16, n_kv_heads=8, head_dim=128, shared_prefix_blocks=0,
               dtype=torch.bfloat16, device="cuda", seed=0):
    """q/k/v and an AttentionBatch over a fresh random cache; the same seed gives the same data."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-(c + n) // block_size) for c, n in specs]
    num_blocks = sum(need) + shared_prefix_blocks + 1
    cache, caches = allocate_kv_cache(1, num_blocks, block_size, n_kv_heads, head_dim, dtype=dtype, device=device)
    cache.copy_(torch.randn(cache.shape, generator=g))
    pool = torch.randperm(num_blocks, generator=g).tolist()
    shared = [pool.pop() for _ in range(shared_prefix_blocks)]
    tables = []
    for (c, _), n_blocks in zip(specs, need):
        prefix = shared if shared and c >= len(shared) * block_size else []
        tables.append(prefix + [pool.pop() for _ in range(n_blocks - len(prefix))])
    total = sum(n for _, n in specs)
    q = torch.randn(total, n_heads, head_dim, generator=g).to(device, dtype)
    k, v = (torch.randn(total, n_kv_heads, head_dim, generator=g).to(device, dtype) for _ in range(2))
    batch = build_attention_batch(tables, [c + n for c, n in specs], [n for _, n in specs], block_size, caches,
                                  backend, device=device)
    return q, k, v, batch
