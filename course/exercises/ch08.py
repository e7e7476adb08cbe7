"""Checkers for chapter 08's exercises (flash attention)."""
import torch

from course.tiling import attention_partial, kv_bytes_read

__all__ = ["CHECKS"]


def check_merge_partials(merge_partials) -> str:
    """07.1: merging split-KV partials gives full attention, for any number and size of splits."""
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
    """07.2: K/V bytes a causal tiled prefill kernel reads, against the course's tile count."""
    for args in [(1, 1, 1, 2), (100, 16, 16, 4), (4096, 64, 128, 4096), (4096, 256, 128, 4096), (300, 128, 64, 1)]:
        want = kv_bytes_read(*args)
        got = kv_bytes_read_fn(*args)
        if got != want:
            raise AssertionError(f"kv_bytes_read{args} = {got}, expected {want}: each query tile reads every key "
                                 "tile that is not entirely in its future (causal), and a short last tile "
                                 "reads fewer tokens")
    small, large = kv_bytes_read(4096, 64, 128, 4096), kv_bytes_read(4096, 256, 128, 4096)
    return f"query tiles of 64 read {small / 2**20:.0f} MiB of K/V, tiles of 256 {large / 2**20:.0f} MiB"


CHECKS = {"08.1": check_merge_partials, "08.2": check_kv_bytes_read}
