"""Random paged-attention batches for GPU checks: scattered block tables, cached context, shared prefixes."""
import torch

from course.paged_batch import build_attention_batch
from nanoserve.attention.batch import allocate_kv_cache

# name -> (sequences as (cached, new) in units of the block size, shared prefix blocks)
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
