"""BlockManager: allocation, freeing, forking, argument checks, and invariants under random operations."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanoserve.kv.blocks import BlockManager, NoFreeBlocksError
from course.kv_viz import layout_blocks


def test_allocate_grows_table_in_place():
    bm = BlockManager(num_blocks=8, block_size=4)
    table = []
    assert bm.allocate(table, 5) is table
    assert len(table) == 2 and bm.num_free_blocks == 6
    bm.allocate(table, 8)  # still fits in two blocks
    assert len(table) == 2
    bm.allocate(table, 9)
    assert len(table) == 3 and bm.num_used_blocks == 3
    assert all(bm.ref_count(b) == 1 for b in table)


def test_blocks_needed_and_can_allocate():
    bm = BlockManager(num_blocks=4, block_size=4)
    assert bm.blocks_needed([], 0) == 0
    assert bm.blocks_needed([], 1) == 1
    assert bm.blocks_needed([], 16) == 4
    assert bm.blocks_needed([0, 1], 5) == 0
    assert bm.can_allocate([], 16) and not bm.can_allocate([], 17)


def test_allocation_failure_leaves_table_unchanged():
    bm = BlockManager(num_blocks=3, block_size=2)
    table = bm.allocate([], 4)
    before = list(table)
    with pytest.raises(NoFreeBlocksError):
        bm.allocate(table, 9)
    assert table == before and bm.num_free_blocks == 1


def test_free_returns_blocks_least_recently_freed_first_and_tail_first():
    bm = BlockManager(num_blocks=4, block_size=1)
    a = bm.allocate([], 2)  # blocks 0, 1
    b = bm.allocate([], 2)  # blocks 2, 3
    bm.free(a)  # tail first: 1 then 0 join the queue
    bm.free(b)  # then 3, 2
    assert bm.allocate([], 4) == [1, 0, 3, 2]


def test_fork_shares_blocks_until_both_freed():
    bm = BlockManager(num_blocks=4, block_size=2)
    a = bm.allocate([], 3)
    c = bm.fork(a)
    assert c == a and c is not a
    assert [bm.ref_count(x) for x in a] == [2, 2]
    bm.free(a)
    assert a == [] and bm.num_free_blocks == 2
    bm.free(c)
    assert bm.num_free_blocks == 4


def test_double_free_and_bad_fork_raise():
    bm = BlockManager(num_blocks=2, block_size=2)
    a = bm.allocate([], 2)
    stale = list(a)
    bm.free(a)
    with pytest.raises(ValueError):
        bm.free(stale)
    with pytest.raises(ValueError):
        bm.fork(stale)


def test_bad_blocks_raise():
    bm = BlockManager(num_blocks=2, block_size=2)
    with pytest.raises(ValueError):
        bm.ref_count(2)
    with pytest.raises(ValueError):
        bm.ref_count(-1)


def test_layout_blocks_interleaves_and_fills():
    tables, pool = layout_blocks([10, 5, 7], block_size=4, num_blocks=12)
    assert tables == [[0, 3, 6], [1, 4], [2, 5]]
    assert pool[6] == (0, 2) and pool[4] == (1, 1) and pool[11] is None
    tables, _ = layout_blocks([10, 5], block_size=4, num_blocks=12, interleave=False)
    assert tables == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError):
        layout_blocks([-1], 4, 4)
    with pytest.raises(NoFreeBlocksError):
        layout_blocks([100], 4, 4)


def check_invariants(bm, tables):
    """Ref counts match the live tables; free and used blocks partition the pool."""
    expected = [0] * bm.num_blocks
    for t in tables:
        for b in t:
            expected[b] += 1
    counts = [bm.ref_count(b) for b in range(bm.num_blocks)]
    assert counts == expected  # never negative, and every used block is reachable from a live table
    free = set(bm._free)
    assert len(free) == bm.num_free_blocks  # no duplicates in the free queue
    assert all(counts[b] == 0 for b in free)  # no block both free and in use
    used = {b for b in range(bm.num_blocks) if counts[b] > 0}
    assert len(free) + len(used) == bm.num_blocks


ops = st.lists(st.tuples(st.sampled_from(["allocate", "append", "free", "fork"]),
                         st.integers(0, 7), st.integers(0, 20)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(num_blocks=st.integers(1, 12), block_size=st.integers(1, 4), operations=ops)
def test_random_operations_keep_invariants(num_blocks, block_size, operations):
    bm = BlockManager(num_blocks, block_size)
    tables, lengths = [], []
    for op, pick, n in operations:
        i = pick % len(tables) if tables else None
        if op == "allocate" or i is None:
            table = []
            try:
                bm.allocate(table, n)
            except NoFreeBlocksError:
                assert table == []
                continue
            tables.append(table)
            lengths.append(n)
        elif op == "append":
            before = list(tables[i])
            try:
                bm.allocate(tables[i], lengths[i] + n)
                lengths[i] += n
            except NoFreeBlocksError:
                assert tables[i] == before
        elif op == "free":
            bm.free(tables.pop(i))
            lengths.pop(i)
        else:
            tables.append(bm.fork(tables[i]))
            lengths.append(lengths[i])
        for t, length in zip(tables, lengths):
            assert len(t) == -(-length // block_size) or (length == 0 and t == [])
        check_invariants(bm, tables)
    for t in tables:
        bm.free(t)
    assert bm.num_free_blocks == num_blocks
