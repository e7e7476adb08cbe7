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


CHECKS = {
    "04.1": check_max_hit_tokens,
    "04.2": check_block_hash_with_extra,
}
