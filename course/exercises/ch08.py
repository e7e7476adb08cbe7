"""Checkers for chapter 08's exercises (flash attention)."""
import torch

from course.tiling import attention_partial, kv_bytes_read

__all__ = ["CHECKS"]


def check_merge_partials(merge_partials) -> str:
    """08.1: merging split-KV partials gives full attention, for any number and size of splits."""
    g = torch.Generator().manual_seed(7)
    for splits in ([40], [10, 30], [1, 17, 5, 17]):
        q = torch.randn(2, 3, 8, generator=g)
        k, v = (torch.randn(2, sum(splits), 8, generator=g) for _ in range(2))
        k[..., -1, :] *= 20  # a large score in the last split: the running maxima differ between splits
        parts, start = [], 0
        for n in splits:
            parts.append(attention_partial(q, k[..., start:start + n, :], v[..., start:start + n, :]))
            start += n
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        got = merge_partials(parts)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            raise AssertionError(f"expected a tensor of shape {tuple(want.shape)}, got "
                                 f"{getattr(got, 'shape', type(got).__name__)}")
        if not torch.allclose(got.float(), want, atol=1e-5, rtol=1e-4):
            raise AssertionError(f"wrong result with {len(splits)} splits of {splits} keys: rescale every "
                                 "partial's l and acc by exp(m_i - m) to the common maximum m before adding")
    return "your merge equals attention over all the keys"


def check_kv_bytes_read(kv_bytes_read_fn) -> str:
    """08.2: K/V bytes a causal tiled prefill kernel reads, against the course's tile count."""
    for args in [(1, 1, 1, 2), (100, 16, 16, 4), (4096, 64, 128, 4096), (4096, 256, 128, 4096), (300, 128, 64, 1)]:
        want = kv_bytes_read(*args)
        got = kv_bytes_read_fn(*args)
        if got != want:
            raise AssertionError(f"kv_bytes_read{args} = {got}, expected {want}: each query tile reads every key "
                                 "tile that is not entirely in its future (causal), and a short last tile "
                                 "reads fewer tokens")
    small, large = kv_bytes_read(4096, 64, 128, 4096), kv_bytes_read(4096, 256, 128, 4096)
    return f"query tiles of 64 read {small / 2**20:.0f} MiB of K/V, tiles of 256 {large / 2**20:.0f} MiB"


def _decode_case(seed: int, dtype=torch.float32):
    """q, caches and a decode AttentionBatch; the never-used last block is NaN, block tails hold large keys."""
    from course.paged_batch import build_attention_batch
    from nanoserve.attention.batch import allocate_kv_cache
    from nanoserve.attention.torch_ref import TorchAttentionBackend

    g = torch.Generator().manual_seed(seed)
    block_size, n_kv, head_dim, num_blocks = 4, 2, 8, 12
    _, caches = allocate_kv_cache(1, num_blocks, block_size, n_kv, head_dim, dtype=dtype)
    k_cache, v_cache = caches[0]
    k_cache.copy_(torch.randn(k_cache.shape, generator=g))
    v_cache.copy_(torch.randn(v_cache.shape, generator=g))
    k_cache[-1], v_cache[-1] = float("nan"), float("nan")  # what table entry -1 would read
    pool = torch.randperm(num_blocks - 1, generator=g).tolist()
    lens = [1, 7, 13, 4, 10]
    tables = [[pool.pop() for _ in range(-(-n // block_size))] for n in lens]
    for table, n in zip(tables, lens):
        if n % block_size:  # rows past the context in the last block: large keys a careless read would favour
            k_cache[table[-1], n % block_size:] *= 50
    batch = build_attention_batch(tables, lens, [1] * len(lens), block_size, caches, TorchAttentionBackend())
    q = torch.randn(len(lens), 4, head_dim, generator=g).to(dtype)
    return q, k_cache, v_cache, batch


def check_paged_decode(paged_decode) -> str:
    """08.5: decode attention over block tables equals the torch reference's decode."""
    from nanoserve.attention.torch_ref import TorchAttentionBackend

    for seed in (0, 1):
        q, k_cache, v_cache, batch = _decode_case(seed)
        want = TorchAttentionBackend().decode(q, k_cache, v_cache, batch)
        got = paged_decode(q.clone(), k_cache, v_cache, batch)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            raise AssertionError(f"expected a tensor of shape {tuple(want.shape)}, got "
                                 f"{getattr(got, 'shape', type(got).__name__)}")
        if torch.isnan(got).any():
            raise AssertionError("NaN in your output: you read a block-table entry past cdiv(context_len, "
                                 "block_size); those are -1, and k_cache[-1] is the cache's last block")
        if got.dtype != q.dtype:
            raise AssertionError(f"return q's dtype ({q.dtype}), got {got.dtype}")
        if not torch.allclose(got, want, atol=1e-5, rtol=1e-4):
            bad = sorted({int(b) for b in ((got - want).abs() > 1e-4).nonzero()[:, 0]})
            lens = batch.context_lens.tolist()
            raise AssertionError(f"wrong output for sequences {bad} (context lengths {[lens[b] for b in bad]}): "
                                 "read only the first context_len % block_size rows of a partly filled last "
                                 "block, rescale l and acc by exp(m - m_new) per block, and let query head h "
                                 "read kv head h // (Hq // Hkv)")
    return ("your decode equals the torch reference; set USE_MY_PAGED_DECODE = True and re-run: section 4's "
            "decode scenario runs on it")


def check_fresh_prefill(fresh_prefill) -> str:
    """08.4: a step is a fresh prefill when no sequence has cached tokens, decided from host tensors."""
    from nanoserve.engine.model_runner import build_step_inputs

    cases = {  # name: (token chunks, cached tokens before each chunk, expected)
        "two fresh prompts": ([[5, 6, 7], [8, 9]], [0, 0], True),
        "one fresh prompt": ([[5, 6, 7, 8]], [0], True),
        "a prefix hit (256 cached tokens, then 3 new)": ([[5, 6, 7], [8, 9]], [256, 0], False),
        "a later chunk of a long prompt": ([[5, 6, 7]], [300], False),
        "a decode step": ([[5], [6]], [40, 7], False),
        "a fresh prompt beside a decode": ([[5, 6, 7], [8]], [0, 12], False),
    }
    for name, (chunks, starts, want) in cases.items():
        tables = [list(range(2 * i, 2 * i + 2)) for i in range(len(chunks))]
        step = build_step_inputs(chunks, starts, tables, [True] * len(chunks), block_size=256)
        got = fresh_prefill(step)
        if got is not want and got != want:
            raise AssertionError(f"fresh_prefill on {name} returned {got!r}, expected {want}: a sequence has cached "
                                 "tokens when its context (cu_seqlens_k) is longer than its new tokens (cu_seqlens_q)")
    return "your test tells fresh prefills from every other step, on the host"


CHECKS = {"08.1": check_merge_partials, "08.2": check_kv_bytes_read, "08.4": check_fresh_prefill,
          "08.5": check_paged_decode}
