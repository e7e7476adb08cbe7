"""Prototype: paged decode attention in one Triton launch that also stores the step's K/V (split-KV, in-kernel combine)."""
import functools

import torch


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def split_decode(q_ptr, k_ptr, v_ptr, k_cache, v_cache, tables, lens, slots, part, stat, count, out,
                     q_stride, k_stride, v_stride, table_stride, scale,
                     HKV: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, BS: tl.constexpr,
                     BLOCK_N: tl.constexpr, SPLITS: tl.constexpr):
        b, h, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        length = tl.load(lens + b)
        d = tl.arange(0, D)
        g = tl.arange(0, G_PAD)
        real = g < G
        q = tl.load(q_ptr + b * q_stride + (h * G + g)[:, None] * D + d[None, :], mask=real[:, None], other=0.0)
        k_new = tl.load(k_ptr + b * k_stride + h * D + d)
        v_new = tl.load(v_ptr + b * v_stride + h * D + d)
        if s == 0:  # the store: this lane's new row, into its slot (-1: a padding lane, nowhere)
            slot = tl.load(slots + b)
            if slot >= 0:
                tl.store(k_cache + slot * (HKV * D) + h * D + d, k_new)
                tl.store(v_cache + slot * (HKV * D) + h * D + d, v_new)
        chunk = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
        start = s * chunk
        end = tl.minimum(start + chunk, length)
        m = tl.full([G_PAD], float("-inf"), tl.float32)
        l = tl.zeros([G_PAD], tl.float32)
        acc = tl.zeros([G_PAD, D], tl.float32)
        for n0 in range(start, end, BLOCK_N):
            pos = n0 + tl.arange(0, BLOCK_N)
            valid = pos < end
            block = tl.load(tables + b * table_stride + pos // BS, mask=valid, other=0)
            rows = (block.to(tl.int64) * BS + pos % BS) * (HKV * D) + h * D
            newest = (pos == length - 1)[:, None]  # read from registers: the store above may not be visible yet
            k = tl.where(newest, k_new[None, :], tl.load(k_cache + rows[:, None] + d[None, :], mask=valid[:, None],
                                                          other=0.0))
            v = tl.where(newest, v_new[None, :], tl.load(v_cache + rows[:, None] + d[None, :], mask=valid[:, None],
                                                          other=0.0))
            scores = tl.dot(q, tl.trans(k)) * scale
            scores = tl.where(valid[None, :], scores, float("-inf"))
            m_new = tl.maximum(m, tl.max(scores, 1))
            p = tl.exp(scores - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        heads = b * (HKV * G) + h * G + g
        if SPLITS == 1:
            tl.store(out + heads[:, None] * D + d[None, :], (acc / l[:, None]).to(out.dtype.element_ty),
                     mask=real[:, None])
        else:
            cell = (b * HKV + h) * SPLITS + s
            tl.store(stat + cell * 2 * G_PAD + g, m)
            tl.store(stat + cell * 2 * G_PAD + G_PAD + g, l)
            tl.store(part + cell * G_PAD * D + g[:, None] * D + d[None, :], acc)
            tl.debug_barrier()  # every thread's partials are written before the counter says so
            done = tl.atomic_add(count + b * HKV + h, 1)  # acq_rel: the last split sees the others' partials
            if done == SPLITS - 1:
                first = (b * HKV + h) * SPLITS
                sp = tl.arange(0, SPLITS)
                ms = tl.load(stat + (first + sp)[:, None] * 2 * G_PAD + g[None, :], cache_modifier=".cg")
                ls = tl.load(stat + (first + sp)[:, None] * 2 * G_PAD + G_PAD + g[None, :], cache_modifier=".cg")
                top = tl.max(ms, 0)
                w = tl.exp(ms - top[None, :])  # an empty split's -inf weighs 0
                total = tl.sum(w * ls, 0)
                accs = tl.load(part + (first + sp)[:, None, None] * G_PAD * D + g[None, :, None] * D + d[None, None, :],
                               cache_modifier=".cg")
                o = tl.sum(w[:, :, None] * accs, 0) / total[:, None]
                tl.store(out + heads[:, None] * D + d[None, :], o.to(out.dtype.element_ty), mask=real[:, None])
                tl.atomic_xchg(count + b * HKV + h, 0)  # ready for the next call (and the next graph replay)

    return split_decode, triton.next_power_of_2


def splits_for(lanes: int, kv_heads: int, programs: int = 128, most: int = 16) -> int:
    """Splits per (lane, kv head) so that about `programs` programs run, a power of two in [1, most]."""
    want = max(1, programs // max(1, lanes * kv_heads))
    return min(most, 1 << (want.bit_length() - 1))


def split_decode(q, k, v, k_cache, v_cache, block_tables, context_lens, slot_mapping, counters, splits=None,
                 block_n=32):
    """q [B, Hq, D], k/v [B, Hkv, D] (this step's rows) -> out [B, Hq, D]; k/v also land in their cache slots.
    `counters` is a zeroed int32 tensor of at least B * Hkv entries that the kernel leaves zeroed."""
    kernel, next_pow2 = _kernel()
    lanes, hq, dim = q.shape
    hkv, bs = k_cache.shape[-2], k_cache.shape[1]
    group = hq // hkv
    g_pad = max(16, next_pow2(group))
    splits = splits or splits_for(lanes, hkv)
    out = torch.empty_like(q)
    part = torch.empty(lanes * hkv * splits * g_pad * dim, device=q.device, dtype=torch.float32)
    stat = torch.empty(lanes * hkv * splits * 2 * g_pad, device=q.device, dtype=torch.float32)
    kernel[(lanes, hkv, splits)](q, k, v, k_cache, v_cache, block_tables, context_lens, slot_mapping, part, stat,
                                 counters, out, q.stride(0), k.stride(0), v.stride(0), block_tables.stride(0),
                                 dim ** -0.5, HKV=hkv, G=group, G_PAD=g_pad, D=dim, BS=bs, BLOCK_N=block_n,
                                 SPLITS=splits)
    return out
