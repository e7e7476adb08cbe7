"""Solutions to chapter 03's exercises, typical mistakes the checkers reject, and written answers."""
import torch

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def empty_slots(seq_lens, block_size):
    """Reserved-but-empty slots: each sequence rounds up to whole blocks."""
    return sum(-(-n // block_size) * block_size - n for n in seq_lens)


def empty_slots_wrong(seq_lens, block_size):
    """Forgets that a full last block wastes nothing."""
    return sum(block_size - n % block_size for n in seq_lens)


def append_slot(manager, table, num_tokens):
    """Grow the table if the last block is full; return the slot of token num_tokens - 1."""
    manager.allocate(table, num_tokens)
    p = num_tokens - 1
    return table[p // manager.block_size] * manager.block_size + p % manager.block_size


def append_slot_wrong(manager, table, num_tokens):
    """Off by one: returns the slot of position num_tokens, the token after the newest."""
    manager.allocate(table, num_tokens + 1)
    p = num_tokens
    return table[p // manager.block_size] * manager.block_size + p % manager.block_size


def copy_on_write(manager, table):
    """Swap a shared last block for a private one; (src, dst) for the cache copy, or None."""
    if not table or manager.ref_count(table[-1]) == 1:
        return None
    fresh = manager.allocate([], 1)  # first, so a full pool raises before anything changes
    src, table[-1] = table[-1], fresh[0]
    manager.free([src])  # this table's reference to the old block goes
    return src, table[-1]


def copy_on_write_wrong(manager, table):
    """Forgets to drop the table's reference to the old block: it leaks."""
    if not table or manager.ref_count(table[-1]) == 1:
        return None
    fresh = manager.allocate([], 1)
    src, table[-1] = table[-1], fresh[0]
    return src, table[-1]


def _online_decode(q, k_cache, v_cache, block_tables, context_lens, rescale=True):
    """Online softmax over one block at a time, per sequence."""
    n_seqs, n_heads, head_dim = q.shape
    block_size, n_kv = k_cache.shape[1], k_cache.shape[2]
    out = torch.zeros(n_seqs, n_heads, head_dim)
    for b in range(n_seqs):
        ctx = int(context_lens[b])
        qf = q[b].float() * head_dim**-0.5
        running_max = torch.full((n_heads,), float("-inf"))
        running_sum = torch.zeros(n_heads)
        acc = torch.zeros(n_heads, head_dim)
        for i in range(-(-ctx // block_size)):
            block, rows = int(block_tables[b, i]), min(block_size, ctx - i * block_size)
            k = k_cache[block, :rows].float().repeat_interleave(n_heads // n_kv, dim=1)  # [rows, Hq, D]
            v = v_cache[block, :rows].float().repeat_interleave(n_heads // n_kv, dim=1)
            scores = torch.einsum("hd,rhd->hr", qf, k)
            new_max = torch.maximum(running_max, scores.max(-1).values)
            weights = (scores - new_max[:, None]).exp()
            scale = (running_max - new_max).exp() if rescale else torch.ones(n_heads)
            running_sum = running_sum * scale + weights.sum(-1)
            acc = acc * scale[:, None] + torch.einsum("hr,rhd->hd", weights, v)
            running_max = new_max
        if ctx:
            out[b] = acc / running_sum[:, None]
    return out.to(q.dtype)


def decode_attention_online(q, k_cache, v_cache, block_tables, context_lens):
    """Paged decode attention by online softmax."""
    return _online_decode(q, k_cache, v_cache, block_tables, context_lens)


def decode_attention_online_wrong(q, k_cache, v_cache, block_tables, context_lens):
    """Keeps a running max but never rescales what was summed before it grew."""
    return _online_decode(q, k_cache, v_cache, block_tables, context_lens, rescale=False)


from nanoserve.kv.blocks import BlockManager  # noqa: E402  (03.6's solution is the chapter's own class)


class HeadFirstBlockManager(BlockManager):
    """Frees a table head first: the head of a sequence, the part most worth sharing, is reused first."""

    def free(self, table):
        for block in table:
            if self.ref_count(block) == 0:
                raise ValueError(f"block {block} is not allocated (double free?)")
        for block in table:
            self._ref_counts[block] -= 1
            if self._ref_counts[block] == 0:
                self._release(block)
        table.clear()


SOLUTIONS = {
    "03.6": BlockManager,
    "03.1": empty_slots,
    "03.2": append_slot,
    "03.3": copy_on_write,
    "03.4": decode_attention_online,
}

WRONG = {
    "03.6": HeadFirstBlockManager,
    "03.1": empty_slots_wrong,
    "03.2": append_slot_wrong,
    "03.3": copy_on_write_wrong,
    "03.4": decode_attention_online_wrong,
}

EXPLANATIONS = {
    "03.5": (
        "Change `_take_free_block` to `self._free.popitem(last=True)`: the block freed last is handed out "
        "first. Its cache lines (and, on a GPU, its pages) were touched moments ago, so reusing it is "
        "friendlier to caches and keeps the working set small. For the prefix cache it is the worst "
        "order: the block a finished request just gave back is exactly the one a similar request "
        "arriving next would have found by hash, and LIFO overwrites it first. Least recently freed "
        "first keeps recently useful contents alive longest, the LRU policy chapter 04 relies on."
    ),
}
