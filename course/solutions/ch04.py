"""Solutions to chapter 04's exercises, typical mistakes the checkers reject, and written answers."""
import hashlib
import struct

from nanoserve.kv.prefix import block_hash

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def max_hit_tokens(prompt_len, block_size):
    """Whole blocks, never covering the last prompt token."""
    return (prompt_len - 1) // block_size * block_size


def max_hit_tokens_wrong(prompt_len, block_size):
    """Forgets the cap: a fully cached prompt would leave nothing to compute logits from."""
    return prompt_len // block_size * block_size


def block_hash_with_extra(parent_hash, token_ids, extra):
    """Chain the plain block hash with the extra keys, in their own hash so they never read as tokens."""
    key = block_hash(parent_hash, token_ids)
    if not extra:
        return key
    h = hashlib.sha256(key.to_bytes(32, "big"))
    h.update(b"extra")
    h.update(struct.pack(f"<{len(extra)}q", *extra))
    return int.from_bytes(h.digest(), "big")


def block_hash_with_extra_wrong(parent_hash, token_ids, extra):
    """Ignores `extra`: two images behind the same placeholder tokens collide."""
    return block_hash(parent_hash, token_ids)


def longest_cached_prefix(token_ids, block_size, lookup):
    """Walk the full blocks before the last token, chaining hashes, until the first miss."""
    blocks, parent = [], None
    for i in range((len(token_ids) - 1) // block_size):
        found = lookup(parent, token_ids[i * block_size:(i + 1) * block_size])
        if found is None:
            break
        block, parent = found
        blocks.append(block)
    return blocks


def longest_cached_prefix_wrong(token_ids, block_size, lookup):
    """Lets the last token's block count: a fully cached prompt would leave nothing to compute."""
    blocks, parent = [], None
    for i in range(len(token_ids) // block_size):
        found = lookup(parent, token_ids[i * block_size:(i + 1) * block_size])
        if found is None:
            break
        block, parent = found
        blocks.append(block)
    return blocks


SOLUTIONS = {"04.7": longest_cached_prefix, "04.1": max_hit_tokens, "04.2": block_hash_with_extra}
WRONG = {"04.7": longest_cached_prefix_wrong, "04.1": max_hit_tokens_wrong, "04.2": block_hash_with_extra_wrong}

EXPLANATIONS = {
    "04.3": (
        "The answer's tokens became KV while turn t decoded them, and `cache_blocks` registers every block "
        "that is full of computed KV, so turn t+1 reuses all full blocks up to the last full block of the "
        "answer (the partial last one is recomputed, together with the new user message). That is why its "
        "argument is `num_computed_tokens`, the tokens whose KV is in the cache, not the prompt length: "
        "after decoding it is prompt + output - 1 (the newest token has no KV yet), and blocks of the "
        "output count as much as blocks of the prompt. One caveat: turn t+1 must re-send exactly the "
        "tokens that were generated; a chat template that re-renders the answer differently (for example "
        "dropping a reasoning block) changes the tokens and breaks the chain at that point."
    ),
    "04.4": (
        "Give each registration a counter value `uid`, store `(parent_uid, token_ids)` per block and index "
        "by that pair: equality of the pair then proves the whole prefix is equal, by induction, with no "
        "hash assumption. The cost is eviction: a child's key names its parent's uid, so when a block is "
        "handed out for new contents every registered descendant must be dropped from the index (they "
        "are unreachable anyway, since lookups walk from the root), which means keeping a children list "
        "per block and removing a whole subtree, no longer O(1) per eviction."
    ),
    "04.5": (
        "Replace the arrival-order loop of `simulate` with a shuffled order and a pool just large enough "
        "for the running requests. With one shared system prompt nothing changes much: the hot blocks are "
        "in use almost all the time. The policy fails when many different prefixes are each reused after "
        "a long gap (several tenants, long conversations resumed later): least recently freed is then "
        "exactly the prefix about to come back. The number of later hits a block will get, not how long "
        "ago it was freed, is what should decide; frequency-aware policies (LFU, or LRU with a small "
        "'protected' segment for blocks hit more than once) do better there."
    ),
    "04.6": (
        "Match all k blocks, then run the model on the last prompt token only: its query attends to the "
        "cached K/V of the whole prompt and gives the logits, and its own K/V are written again into the "
        "last slot. That write is the problem: the last block is full and may be shared (ref count > 1) "
        "with a running request. Writing identical values is harmless in exact arithmetic, but a different "
        "kernel or batch shape can produce slightly different bits under another reader. The safe options "
        "are to skip the store for that token (attention reads the cached value instead of the new one) "
        "or to copy the last block first (copy-on-write, exercise 03.3)."
    ),
}
