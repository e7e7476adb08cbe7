"""Checkers for chapter 03's exercises (paged KV cache)."""
import random

import torch

from nanoserve.kv.blocks import BlockManager

__all__ = ["CHECKS"]


def check_empty_slots(empty_slots) -> str:
    """03.1: reserved-but-empty slots of sequences in their own blocks."""
    rng = random.Random(0)
    cases = [([10, 5, 7], 4), ([8, 16], 8), ([0, 1], 4), ([33], 1)]
    cases += [([rng.randint(0, 300) for _ in range(5)], rng.choice([2, 4, 16, 256])) for _ in range(20)]
    for lens, bs in cases:
        want = sum(-(-n // bs) * bs - n for n in lens)
        got = empty_slots(list(lens), bs)
        assert got == want, (f"hint: empty_slots({lens}, {bs}) returned {got}, expected {want}; a sequence of n "
                             "tokens holds ceil(n / block_size) blocks, and a full last block wastes nothing")
    return "a sequence wastes (block_size - n % block_size) % block_size slots, about (block_size - 1) / 2 on average"


def check_append_slot(append_slot) -> str:
    """03.2: grow by one token and return the new token's slot."""
    manager = BlockManager(num_blocks=16, block_size=4)
    other, table = [], []
    for n in range(1, 14):
        manager.allocate(other, n)  # a neighbour grows in turn, so blocks are not consecutive
        free_before = manager.num_free_blocks
        slot = append_slot(manager, table, n)
        want = table[(n - 1) // 4] * 4 + (n - 1) % 4 if len(table) * 4 >= n else None
        assert want is not None, f"hint: after append_slot(..., num_tokens={n}) the table {table} cannot hold {n} tokens"
        assert slot == want, f"hint: for num_tokens={n} the newest token is position {n - 1}: slot {want}, got {slot}"
        used = free_before - manager.num_free_blocks
        assert used == (1 if (n - 1) % 4 == 0 else 0), (
            f"hint: num_tokens={n} took {used} new blocks; a block is needed only when the previous one is full")
    return "the scheduler's decode step calls this for every running sequence"


def check_copy_on_write(copy_on_write) -> str:
    """03.3: a private copy of a shared last block."""
    manager = BlockManager(num_blocks=8, block_size=4)
    table = manager.allocate([], 6)
    assert copy_on_write(manager, table) is None, "hint: an unshared last block needs no copy: return None"
    forked = manager.fork(table)
    src = forked[-1]
    pair = copy_on_write(manager, forked)
    assert pair is not None and pair[0] == src, f"hint: the shared last block {src} must be copied, got {pair}"
    dst = pair[1]
    assert forked[-1] == dst != src and forked[:-1] == table[:-1], (
        f"hint: the table should keep its first blocks and end in the new block, got {forked}")
    assert manager.ref_count(src) == 1, (
        f"hint: the old block keeps its other owner only: ref count {manager.ref_count(src)}, expected 1")
    assert manager.ref_count(dst) == 1, f"hint: the new block belongs to this table only (ref count {manager.ref_count(dst)})"
    assert manager.ref_count(forked[0]) == 2, "hint: full blocks stay shared: copy only the last block"
    manager.free(forked)
    manager.free(table)
    assert manager.num_free_blocks == 8, "hint: after freeing both tables every block must be free again (a leak?)"
    return "only the partly filled last block needs a copy: full blocks are never written again"


def check_decode_attention_online(decode_attention_online) -> str:
    """03.4: online-softmax decode equals the vectorised reference."""
    from course.paged_batch import build_attention_batch
    from nanoserve.attention.batch import allocate_kv_cache
    from nanoserve.attention.torch_ref import TorchAttentionBackend

    gen = torch.Generator().manual_seed(0)
    block_size, n_heads, n_kv, head_dim = 4, 4, 2, 8
    backend = TorchAttentionBackend()
    cache, caches = allocate_kv_cache(1, 32, block_size, n_kv, head_dim)
    cache.normal_(generator=gen)
    cache[:, :, :, 0] *= 8  # some large scores, so a missing max-rescale shows
    manager, lens = BlockManager(32, block_size), [7, 1, 16, 13, 30]
    tables = [manager.allocate([], n) for n in lens]
    batch = build_attention_batch(tables, lens, [1] * len(lens), block_size, caches, backend)
    q = torch.randn(len(lens), n_heads, head_dim, generator=gen)
    want = backend.decode(q, *caches[0], batch)
    got = decode_attention_online(q, *caches[0], batch.block_tables, batch.context_lens)
    assert tuple(got.shape) == tuple(want.shape), f"hint: expected shape {tuple(want.shape)}, got {tuple(got.shape)}"
    torch.testing.assert_close(got.float(), want.float(), atol=1e-4, rtol=1e-4,
                               msg=lambda m: "hint: the result differs from the reference decode; when the running "
                                             "maximum grows, rescale the running sum and the accumulator by "
                                             "exp(old_max - new_max)\n" + m)
    return "one pass over the blocks, memory independent of the context length"


def check_block_manager(manager_class) -> str:
    """03.6 (build it yourself): a block manager with BlockManager's interface and behaviour."""
    m = manager_class(num_blocks=6, block_size=4)
    assert m.num_free_blocks == 6, f"hint: a new pool of 6 blocks has 6 free, got {m.num_free_blocks}"
    t = []
    assert m.allocate(t, 5) is t and len(t) == 2, f"hint: 5 tokens in blocks of 4 need 2 blocks, the table is {t}"
    m.allocate(t, 8)
    assert len(t) == 2, "hint: 8 tokens still fit in 2 blocks of 4: allocate only what is missing"
    m.allocate(t, 9)
    assert len(t) == 3 and m.num_free_blocks == 3, f"hint: 9 tokens need a third block; table {t}"
    u = []
    try:
        m.allocate(u, 100)
        raise AssertionError("hint: 100 tokens need 25 blocks and only 3 are free: raise NoFreeBlocksError")
    except AssertionError:
        raise
    except Exception as err:
        assert type(err).__name__ == "NoFreeBlocksError", f"hint: raise NoFreeBlocksError, not {type(err).__name__}"
    assert u == [] and m.num_free_blocks == 3, "hint: allocate is all or nothing: a failed call changes nothing"
    c = m.fork(t)
    assert c == t and c is not t, "hint: fork returns a new list holding the same blocks"
    assert all(m.ref_count(b) == 2 for b in t), "hint: after fork every shared block has ref count 2"
    m.free(t)
    assert t == [] and m.num_free_blocks == 3, "hint: free empties the table; shared blocks stay allocated"
    m.free(c)
    assert m.num_free_blocks == 6, "hint: when the last owner frees a block it goes back to the free queue"
    try:
        m.free([0])
        raise AssertionError("hint: freeing a block nobody holds is a double free: raise ValueError")
    except ValueError:
        pass
    lru = manager_class(num_blocks=4, block_size=1)
    a, b = lru.allocate([], 1), lru.allocate([], 1)
    first, second = a[0], b[0]
    lru.free(a)
    lru.free(b)
    order = [lru.allocate([], 1)[0] for _ in range(4)]
    assert order == [2, 3, first, second], (f"hint: hand out the least recently freed block first; blocks came out "
                                         f"in the order {order}")
    tail = manager_class(num_blocks=4, block_size=1)
    table = tail.allocate([], 3)
    tail.free(table)
    order = [tail.allocate([], 1)[0] for _ in range(4)]
    assert order == [3, 2, 1, 0], (f"hint: free a table tail first, so its head block is reused last; blocks came "
                                   f"out in the order {order}")
    return "the rest of the chapter can run on it: set USE_MY_BLOCK_MANAGER = True and re-run"


CHECKS = {
    "03.6": check_block_manager,
    "03.1": check_empty_slots,
    "03.2": check_append_slot,
    "03.3": check_copy_on_write,
    "03.4": check_decode_attention_online,
}
