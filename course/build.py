"""Build-it-yourself plumbing: run a chapter on the reader's own block manager, prefix match or scheduler step.

Hand-written teaching aid (not exported by a chapter). Each `with_*` helper returns a class with the reader's
piece in place of the package's, so the rest of a chapter runs on it when its switch is on.
"""
from nanoserve.kv.prefix import PrefixCachingBlockManager, block_hash

__all__ = ["cached_block_lookup", "with_prefix_match"]


def cached_block_lookup(manager: PrefixCachingBlockManager):
    """lookup(parent_hash, block_tokens) -> (block, hash) of a verified cached block, or None."""
    def lookup(parent_hash, tokens):
        tokens = tuple(tokens)
        h = block_hash(parent_hash, tokens)
        block = manager._index.get(h)
        entry = manager._cached.get(block)
        if entry is None or entry.token_ids != tokens or entry.parent_hash != parent_hash:
            return None
        return block, h
    return lookup


def with_prefix_match(longest_cached_prefix, base=PrefixCachingBlockManager):
    """A prefix-caching manager whose match_prefix finds its blocks with the reader's `longest_cached_prefix`."""
    class ReadersPrefixCache(base):
        """PrefixCachingBlockManager with the reader's prefix search; reference counting stays the package's."""

        def match_prefix(self, token_ids):
            matched = list(longest_cached_prefix(list(token_ids), self.block_size, cached_block_lookup(self)))
            for block in matched:
                if self._ref_counts[block] == 0:
                    del self._free[block]
                self._ref_counts[block] += 1
            self.query_tokens += len(token_ids)
            self.hit_tokens += len(matched) * self.block_size
            return matched

    return ReadersPrefixCache
