"""Checkers for chapter 13's exercises (cascade attention)."""
__all__ = ["CHECKS"]


def check_merge(merge) -> str:
    """13.1: two partial attentions and their log-sum-exps merge into attention over all the keys."""
    import torch

    from nanoserve.attention.cascade import attend_with_lse

    g = torch.Generator().manual_seed(6)
    q, k, v = (30 * torch.randn(shape, generator=g) for shape in ((2, 4, 8), (9, 2, 8), (9, 2, 8)))
    got = merge(*attend_with_lse(q, k[:4], v[:4]), *attend_with_lse(q, k[4:], v[4:]))
    if not torch.isfinite(got).all():
        raise AssertionError("with large scores the merge overflows: subtract the larger lse before exponentiating "
                             "(or use torch.logaddexp)")
    for split in (1, 7, 19):
        q, k, v = (torch.randn(shape, generator=g) for shape in ((3, 4, 8), (20, 2, 8), (20, 2, 8)))
        whole, _ = attend_with_lse(q, k, v)
        got = merge(*attend_with_lse(q, k[:split], v[:split]), *attend_with_lse(q, k[split:], v[split:]))
        if not torch.allclose(got, whole, atol=1e-5):
            raise AssertionError(f"with the keys split at {split} the merge is off by {(got - whole).abs().max():.3g}: "
                                 "weight each half by exp(its lse - the lse of both), where the lse of both is "
                                 "log(exp(lse_a) + exp(lse_b))")
    return "the same result as attending all the keys at once"



def counted_reads(context_lens, shared, block_size=16) -> tuple:
    """Run the plain per-sequence loop and the cascade's torch kernels on a random cache; count gathered key rows."""
    import torch

    import nanoserve.attention.cascade as cascade
    import nanoserve.attention.torch_ref as torch_ref
    from nanoserve.attention.batch import AttentionBatch, allocate_kv_cache

    n, width = len(context_lens), -(-max(context_lens) // block_size)
    prefix_blocks = shared // block_size
    _, (cache,) = allocate_kv_cache(1, prefix_blocks + n * width + 1, block_size, 2, 8)
    tables = torch.tensor([list(range(prefix_blocks)) + [prefix_blocks + i * width + j for j in range(width - prefix_blocks)]
                           for i in range(n)], dtype=torch.int32)
    context, q = torch.tensor(context_lens, dtype=torch.int32), torch.randn(n, 4, 8)
    counts, real = [0], torch_ref.gather_context

    def counting(k_cache, v_cache, table, length):
        counts[0] += int(length)
        return real(k_cache, v_cache, table, length)

    torch_ref.gather_context = cascade.gather_context = counting
    try:
        cu = torch.arange(n + 1, dtype=torch.int32)
        torch_ref.TorchAttentionBackend().varlen(q, *cache, AttentionBatch(None, cu, None, 1, 512, context, tables,
                                                                            [cache], None))
        plain, counts[0] = counts[0], 0
        prefix = AttentionBatch(None, torch.tensor([0, n]), torch.tensor([0, shared]), n, 512, None,
                                tables[:1, :prefix_blocks], [cache], None)
        suffix = AttentionBatch(None, None, None, 1, 512, context - shared, tables[:, prefix_blocks:], [cache], None,
                                is_decode=True)
        cascade.TorchCascadeKernels.prefix(q, *cache, prefix)
        cascade.TorchCascadeKernels.suffix(q, *cache, suffix)
    finally:
        torch_ref.gather_context = cascade.gather_context = real
    return plain, counts[0]


def check_predicted_reads(predicted_reads) -> str:
    """13.2: the reader's predicted key reads of one decode step against the rows the torch kernels gather."""
    cases = [([40, 60, 33], 32), ([17, 17], 16), ([100] * 8, 64), ([49, 80, 200, 65, 51], 48)]
    for context_lens, shared in cases:
        got, want = predicted_reads(list(context_lens), shared), counted_reads(context_lens, shared)
        if tuple(got) != want:
            raise AssertionError(f"predicted_reads({context_lens}, {shared}) = {got!r}, but the kernels gathered "
                                 "a different number of rows: how often does each half read the shared prefix?")
    return "your prediction matches the rows the kernels gathered"


def check_prefix_weight(prefix_weight) -> str:
    """13.4: the prefix's weight in the merge, from the two lse tensors and the members' flags, as merge_members does."""
    import torch

    g = torch.Generator().manual_seed(13)
    for scale in (3.0, 200.0):  # at 200 the scores' exponentials overflow float32: only a difference survives
        lse_a, lse_b = (scale * torch.randn(6, 4, generator=g) for _ in range(2))
        members = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.int32)
        want = torch.where(members[:, None] != 0, (lse_a - torch.logaddexp(lse_a, lse_b)).exp(), 0.0)
        got = prefix_weight(lse_a, lse_b, members)
        if not torch.isfinite(got).all():
            raise AssertionError(f"with lse values near {scale:g} the weight is not finite: exp(lse) overflows, so "
                                 "write the weight through lse_a - lse_b alone")
        if not torch.allclose(got, want, atol=1e-6):
            raise AssertionError(f"off by {(got - want).abs().max():.3g} (lse values near {scale:g}): the prefix's "
                                 "weight is exp(lse_a - logaddexp(lse_a, lse_b)); divide top and bottom by exp(lse_a), "
                                 "and a lane that is not a member must get 0")
    return "the prefix's weight, for members and the others, with no logaddexp and no overflow"


CHECKS = {"13.1": check_merge, "13.2": check_predicted_reads, "13.4": check_prefix_weight}
