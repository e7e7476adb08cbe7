"""Checkers for chapter 04's exercises (prefix caching)."""
from nanoserve.kv.prefix import PrefixCachingBlockManager

__all__ = ["CHECKS"]


def check_max_hit_tokens(max_hit_tokens) -> str:
    """04.1: the cap on prefix hits, compared with a real manager whose cache holds the whole prompt."""
    for block_size in (1, 4, 16):
        for prompt_len in (1, 2, 3, 4, 5, 8, 9, 16, 17, 33):
            manager = PrefixCachingBlockManager(64, block_size)
            prompt = list(range(prompt_len))
            table = manager.allocate([], prompt_len + block_size)  # an earlier request with a longer prompt
            manager.cache_blocks(table, prompt + [0] * block_size, prompt_len + block_size)
            want = len(manager.match_prefix(prompt)) * block_size
            got = max_hit_tokens(prompt_len, block_size)
            assert got == want, (f"hint: max_hit_tokens({prompt_len}, {block_size}) returned {got}, expected {want}: "
                                 "whole blocks only, and the last prompt token is always computed")
    return "(prompt_len - 1) // block_size full blocks: the last token always runs through the model"


def check_block_hash_with_extra(block_hash_with_extra) -> str:
    """04.2: an extra key (image hash, adapter id) is part of the block's identity."""
    tokens = [151655] * 4  # the same placeholder tokens for two different images
    a = block_hash_with_extra(None, tokens, (111,))
    b = block_hash_with_extra(None, tokens, (222,))
    assert isinstance(a, int), f"hint: return an int key, got {type(a).__name__}"
    assert a != b, "hint: two images behind the same placeholder tokens got the same key: a wrong prefix hit"
    assert a == block_hash_with_extra(None, list(tokens), (111,)), "hint: the key must be deterministic"
    assert block_hash_with_extra(a, [1, 2], ()) != block_hash_with_extra(b, [1, 2], ()), (
        "hint: the parent hash must still be part of the key (the chain)")
    assert block_hash_with_extra(None, [1, 2], ()) != block_hash_with_extra(None, [1, 3], ()), (
        "hint: the block's own tokens must still be part of the key")
    assert block_hash_with_extra(None, [1, 2], (3,)) != block_hash_with_extra(None, [1, 2, 3], ()), (
        "hint: extra ints must not be confused with token ids (hash them apart from the tokens)")
    return "an adapter id or image hash in the key keeps different KV apart"


def _prefix_pool(manager_class):
    """A pool in which two prompts sharing their first two blocks have been computed and cached."""
    from nanoserve.kv.prefix import PrefixCachingBlockManager  # noqa: F401  (the reference of every pool)

    m = manager_class(num_blocks=32, block_size=4)
    for prompt in (list(range(1, 14)), list(range(1, 9)) + [50, 51, 52, 53, 54]):
        table = m.allocate([], len(prompt))
        m.cache_blocks(table, prompt, len(prompt))
    lone = [90, 91, 92, 93] + [5, 6, 7, 8]  # block 2 of the first prompt, after another first block
    table = m.allocate([], len(lone))
    m.cache_blocks(table, lone, len(lone))
    return m


def check_longest_cached_prefix(longest_cached_prefix) -> str:
    """04.7 (build it yourself): the longest chain of cached full blocks at the start of a prompt."""
    from course.build import with_prefix_match
    from nanoserve.kv.prefix import PrefixCachingBlockManager

    queries = [list(range(1, 14)), list(range(1, 13)), list(range(1, 9)), list(range(1, 9)) + [50, 51, 52, 53, 99],
               [1, 2, 3, 4, 5, 6, 7, 9, 9, 9], [90, 91, 92, 93, 5, 6, 7, 8, 1], [0, 1, 2, 3, 5, 6, 7, 8, 9],
               [5, 6, 7, 8, 9, 10, 11, 12, 13], [1, 2, 3], []]
    for q in queries:
        want = _prefix_pool(PrefixCachingBlockManager).match_prefix(q)
        mine = _prefix_pool(with_prefix_match(longest_cached_prefix))
        got = mine.match_prefix(q)
        assert got == want, (f"hint: for a prompt of {len(q)} tokens starting {q[:9]} the cached prefix is "
                             f"{want}, you found {got}; only full blocks before the last token count, each "
                             "looked up with its parent's hash, and the chain stops at the first miss")
    return "the rest of the chapter can run on it: set USE_MY_PREFIX_MATCH = True and re-run"


CHECKS = {
    "04.7": check_longest_cached_prefix,
    "04.1": check_max_hit_tokens,
    "04.2": check_block_hash_with_extra,
}
