"""Prefix caching: chained hashes, matching, the last-token cap, revival, eviction, and random-operation invariants."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanoserve.kv.blocks import NoFreeBlocksError
from nanoserve.kv.prefix import PrefixCachingBlockManager, block_hash


def run_prompt(bm, prompt, extra_tokens=0):
    """Scheduler-like use: match, allocate the rest, register the computed prompt blocks."""
    table = bm.match_prefix(prompt)
    cached = len(table) * bm.block_size
    try:
        bm.allocate(table, len(prompt) + extra_tokens)
    except NoFreeBlocksError:
        bm.free(table)
        raise
    bm.cache_blocks(table, prompt, len(prompt))
    return table, cached


def test_block_hash_chains_and_is_deterministic():
    h0 = block_hash(None, [1, 2, 3])
    assert h0 == block_hash(None, (1, 2, 3))
    assert block_hash(h0, [4]) != block_hash(block_hash(None, [1, 2, 9]), [4])
    assert block_hash(None, [1, 2]) != block_hash(None, [2, 1])
    assert 0 <= h0 < 2**256
    with pytest.raises(TypeError):
        block_hash("parent", [1])


def test_shared_prefix_is_reused_with_ref_counts():
    bm = PrefixCachingBlockManager(16, 4)
    system = list(range(12))
    a, cached_a = run_prompt(bm, system + [100, 101])
    b, cached_b = run_prompt(bm, system + [200])
    assert cached_a == 0 and cached_b == 12
    assert b[:3] == a[:3] and b[3] != a[3]
    assert [bm.ref_count(x) for x in a[:3]] == [2, 2, 2]
    assert bm.hit_tokens == 12 and bm.query_tokens == 14 + 13
    assert bm.hit_rate == pytest.approx(12 / 27)


def test_freed_blocks_stay_cached_and_are_revived():
    bm = PrefixCachingBlockManager(8, 4)
    prompt = list(range(9))
    a, _ = run_prompt(bm, prompt)
    head = a[:2]
    bm.free(a)
    assert bm.num_free_blocks == 8
    b, cached = run_prompt(bm, prompt)
    assert cached == 8 and b[:2] == head
    assert bm.num_free_blocks == 5


def test_identical_prompt_of_whole_blocks_sent_twice():
    bm = PrefixCachingBlockManager(8, 4)
    prompt = list(range(8))
    a, _ = run_prompt(bm, prompt)
    first = list(a)
    bm.free(a)
    b, cached = run_prompt(bm, prompt)
    assert cached == 4  # the last block is recomputed so the last token produces logits
    assert b[0] == first[0] and len(b) == 2
    again = bm.match_prefix(prompt + [8])
    assert again == b  # the live copy is what the index now points to
    bm.free(again)
    bm.free(b)
    assert bm.num_free_blocks == 8


def test_match_cap_and_short_prompts():
    bm = PrefixCachingBlockManager(8, 4)
    run_prompt(bm, list(range(12)))
    assert len(bm.match_prefix(list(range(12)))) == 2
    assert len(bm.match_prefix(list(range(13)))) == 3
    assert bm.match_prefix([0]) == []
    assert bm.match_prefix([]) == []


def test_partial_and_uncomputed_blocks_are_not_cached():
    bm = PrefixCachingBlockManager(8, 4)
    prompt = list(range(10))
    table = bm.match_prefix(prompt)
    bm.allocate(table, len(prompt))
    bm.cache_blocks(table, prompt, 6)  # a chunked prefill has computed 6 tokens: one full block
    assert bm.num_cached_blocks == 1
    assert bm.cached_block(table[0]).token_ids == (0, 1, 2, 3) and bm.cached_block(table[1]) is None
    bm.cache_blocks(table, prompt, 10)
    assert bm.num_cached_blocks == 2 and bm.cached_block(table[2]) is None
    with pytest.raises(ValueError):
        bm.cache_blocks(table, prompt, 11)
    with pytest.raises(ValueError):
        bm.cache_blocks(table, prompt, -1)


def test_different_past_does_not_match():
    bm = PrefixCachingBlockManager(8, 2)
    run_prompt(bm, [1, 2, 3, 4, 5])
    assert bm.match_prefix([9, 9, 3, 4, 5]) == []
    assert len(bm.match_prefix([1, 2, 3, 9, 5])) == 1


def test_hash_collision_cannot_return_wrong_blocks():
    bm = PrefixCachingBlockManager(8, 2)
    table, _ = run_prompt(bm, [1, 2, 3])
    # simulate a collision: the key of [7, 7] points at the block that holds [1, 2]
    bm._index[block_hash(None, [7, 7])] = table[0]
    assert bm.match_prefix([7, 7, 5]) == []


def test_cached_block_and_hash_chain_rows_follow_the_chain():
    from course.kv_viz import hash_chain_rows

    bm = PrefixCachingBlockManager(num_blocks=16, block_size=4)
    shared = list(range(100, 108))
    a, _ = run_prompt(bm, shared + [1, 2, 3, 4, 5])
    b, cached = run_prompt(bm, shared + [9, 9, 9, 9, 9])
    assert cached == 8 and a[:2] == b[:2]
    first, second = bm.cached_block(a[0]), bm.cached_block(a[1])
    assert first.parent_hash is None and second.parent_hash == first.hash
    assert bm.cached_block(a[3]) is None  # partial: never registered
    with pytest.raises(ValueError):
        bm.cached_block(16)
    rows = hash_chain_rows(bm, [a, b])
    assert [c["shared"] for c in rows[1]] == [True, True, False, False]
    assert [c["ref_count"] for c in rows[0]] == [2, 2, 1, 1]
    assert rows[0][0]["parent"] == "root" and rows[0][1]["parent"] == rows[0][0]["hash"]
    assert rows[0][2]["parent"] == rows[1][2]["parent"] and rows[0][2]["hash"] != rows[1][2]["hash"]
    assert rows[0][3]["hash"] is None and rows[1][3]["hash"] is None


def test_reallocation_drops_the_hash_least_recently_freed_first():
    bm = PrefixCachingBlockManager(4, 2)
    a, _ = run_prompt(bm, [1, 2, 3, 4, 5])  # 3 blocks, 2 full
    blocks = list(a)
    bm.free(a)  # freed tail first: blocks[2], blocks[1], blocks[0]
    other = bm.allocate([], 4)  # the never-used block, then blocks[2]
    assert other[1] == blocks[2]
    assert len(bm.match_prefix([1, 2, 3, 4, 5])) == 2  # both full blocks survive
    bm.free(other)
    bm2 = PrefixCachingBlockManager(2, 2)
    a, _ = run_prompt(bm2, [1, 2, 3, 4])
    assert bm2.num_cached_blocks == 2
    bm2.free(a)
    bm2.allocate([], 4)  # takes both blocks: every hash is dropped
    assert bm2.num_cached_blocks == 0 and bm2.match_prefix([1, 2, 3, 4, 5]) == []


class Model:
    """A live request in the property test: its table and the tokens whose KV it holds."""

    def __init__(self, table, tokens):
        self.table, self.tokens = table, tokens


@settings(max_examples=300, deadline=None)
@given(num_blocks=st.integers(1, 10), block_size=st.integers(1, 3),
       operations=st.lists(st.tuples(st.sampled_from(["start", "append", "free", "fork"]),
                                     st.integers(0, 7),
                                     st.lists(st.integers(0, 2), min_size=0, max_size=9)),
                           max_size=30))
def test_random_operations_keep_invariants(num_blocks, block_size, operations):
    bm = PrefixCachingBlockManager(num_blocks, block_size)
    live = []
    for op, pick, tokens in operations:
        i = pick % len(live) if live else None
        if op == "start" or i is None:
            try:
                table, cached = run_prompt(bm, tokens)
            except NoFreeBlocksError:
                continue
            assert cached <= max(0, len(tokens) - 1)
            live.append(Model(table, list(tokens)))
        elif op == "append":
            req = live[i]
            partial = len(req.tokens) % bm.block_size
            if partial and bm.ref_count(req.table[-1]) > 1:
                continue  # writing into a shared partial block needs copy-on-write, the caller's job
            new = req.tokens + tokens
            before = list(req.table)
            try:
                bm.allocate(req.table, len(new))
            except NoFreeBlocksError:
                assert req.table == before
                continue
            req.tokens = new
            bm.cache_blocks(req.table, new, len(new))
        elif op == "free":
            bm.free(live.pop(i).table)
        else:
            live.append(Model(bm.fork(live[i].table), list(live[i].tokens)))
        check_invariants(bm, live)


def check_invariants(bm, live):
    expected = [0] * bm.num_blocks
    for req in live:
        for b in req.table:
            expected[b] += 1
    counts = [bm.ref_count(b) for b in range(bm.num_blocks)]
    assert counts == expected
    free = set(bm._free)
    assert len(free) == bm.num_free_blocks and all(counts[b] == 0 for b in free)
    assert len(free) + sum(c > 0 for c in counts) == bm.num_blocks
    # every cached block in a live table holds exactly the tokens that were hashed for it
    for req in live:
        for j, b in enumerate(req.table):
            cached = bm.cached_block(b)
            if cached is not None:
                assert list(cached.token_ids) == req.tokens[j * bm.block_size:(j + 1) * bm.block_size]
    # and whatever match_prefix returns for a live request's tokens is a prefix of equal tokens
    for req in live:
        matched = bm.match_prefix(req.tokens)
        for j, b in enumerate(matched):
            assert list(bm.cached_block(b).token_ids) == req.tokens[j * bm.block_size:(j + 1) * bm.block_size]
        bm.free(matched)
