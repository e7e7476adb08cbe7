"""Solutions to chapter 14's exercises, typical mistakes the checkers reject, and written answers."""
import torch


def kv_heads_of_rank(rank, tp_size, n_heads, n_kv_heads):
    """A rank's q heads are a contiguous block; the kv heads they read are a contiguous block too."""
    if n_kv_heads >= tp_size:
        per_rank = n_kv_heads // tp_size
        return list(range(rank * per_rank, (rank + 1) * per_rank))
    return [rank // (tp_size // n_kv_heads)]  # replicated on tp_size // n_kv_heads neighbouring ranks


def kv_heads_round_robin(rank, tp_size, n_heads, n_kv_heads):
    """Deals kv heads out like cards: right when each rank has its own, wrong once they are copied."""
    if n_kv_heads >= tp_size:
        per_rank = n_kv_heads // tp_size
        return list(range(rank * per_rank, (rank + 1) * per_rank))
    return [rank % n_kv_heads]


def greedy_from_shards(shards):
    """Each rank sends (max, global id) per row; rank 0 keeps the best."""
    width = shards[0].shape[-1]
    values = torch.stack([s.max(dim=-1).values for s in shards])  # [tp, rows]
    ids = torch.stack([s.argmax(dim=-1) + r * width for r, s in enumerate(shards)])  # global ids
    return ids.gather(0, values.argmax(0, keepdim=True))[0]


def greedy_from_shards_local_ids(shards):
    """Forgets that each rank's argmax indexes its own slice."""
    values = torch.stack([s.max(dim=-1).values for s in shards])
    ids = torch.stack([s.argmax(dim=-1) for s in shards])
    return ids.gather(0, values.argmax(0, keepdim=True))[0]


def shard_range(kind, full_shape, rank, tp_size):
    """Columns split dim 0 and rows dim 1 evenly; the vocabulary in equal blocks, the last ones cut at its end."""
    if kind == "column":
        size = full_shape[0] // tp_size
        return 0, rank * size, size
    if kind == "row":
        size = full_shape[1] // tp_size
        return 1, rank * size, size
    block = -(-full_shape[0] // tp_size)  # every rank the same block; the vocabulary may end inside one
    start = min(rank * block, full_shape[0])
    return 0, start, min(block, full_shape[0] - start)


def shard_range_floor_vocab(kind, full_shape, rank, tp_size):
    """A typical mistake: vocab // tp ids per rank, so an uneven vocabulary loses its last ids."""
    if kind == "vocab":
        size = full_shape[0] // tp_size
        return 0, rank * size, size
    return shard_range(kind, full_shape, rank, tp_size)


SOLUTIONS = {"14.1": kv_heads_of_rank, "14.2": greedy_from_shards, "14.5": shard_range}
WRONG = {"14.1": kv_heads_round_robin, "14.2": greedy_from_shards_local_ids, "14.5": shard_range_floor_vocab}
EXPLANATIONS = {
    "14.3": (
        "Gathering the logits sends rank 1's half of every row to rank 0: 256 rows x 75,968 ids x 4 bytes =\n"
        "77,791,232 bytes (about 74 MiB) per step. Sending one (value, id) pair per row instead is 256 x (4 + 8) =\n"
        "3,072 bytes. The scheme only works for greedy (or for top-1-style decisions): temperature sampling over the\n"
        "whole vocabulary needs each rank's normalizer too (sum of exp), and top-p needs more still, which is why\n"
        "engines usually gather logits or all-gather a small top-k per rank."),
    "14.4": (
        "With sequence parallelism each rank holds T/tp tokens between the row layer and the next column layer. The\n"
        "all-reduce (which is a reduce-scatter followed by an all-gather) is split into its two halves: the\n"
        "reduce-scatter leaves each rank the summed rows of its own tokens, RMSNorm and the residual add run on T/tp\n"
        "tokens instead of T on every rank, and an all-gather rebuilds the full activation right before qkv_proj or\n"
        "gate_up_proj. The bytes on the wire are the same as one all-reduce, but the norm's work and the activation\n"
        "memory between the layers shrink by tp. Check it by comparing against the dense model's hidden states."),
}
