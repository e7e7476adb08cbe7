"""Checkers for chapter 14's exercises (tensor parallelism): kv heads per rank, greedy sampling from shards."""
import torch

from nanoserve.parallel.group import TPGroup
from nanoserve.parallel.layers import QKVParallelLinear

CASES = [(2, 4, 2), (4, 16, 8), (4, 8, 2), (8, 16, 2), (4, 4, 1), (2, 6, 6)]  # (tp, q heads, kv heads)


def _loaded_kv_heads(rank: int, tp: int, n_heads: int, n_kv_heads: int) -> list:
    """The kv heads QKVParallelLinear really loads on `rank`, read off its weight loader with a labelled tensor."""
    group = TPGroup(rank, tp, process_group=None if tp == 1 else "placeholder: no collectives")
    layer = QKVParallelLinear(8, 1, n_heads, n_kv_heads, group=group)
    labelled = torch.arange(n_kv_heads, dtype=torch.float32)[:, None].expand(n_kv_heads, 8)  # row i holds i
    layer.weight.weight_loader(layer.weight, labelled, "k")
    first, rows = layer.shard_range("k")
    return [int(v) for v in layer.weight.data[first:first + rows, 0]]


def check_kv_heads_of_rank(kv_heads_of_rank) -> str:
    """10.1: kv_heads_of_rank(rank, tp_size, n_heads, n_kv_heads) must match QKVParallelLinear's loader."""
    for tp, n_heads, n_kv in CASES:
        for rank in range(tp):
            want = _loaded_kv_heads(rank, tp, n_heads, n_kv)
            got = list(kv_heads_of_rank(rank, tp, n_heads, n_kv))
            assert got == want, (f"hint: tp={tp}, {n_heads} q heads, {n_kv} kv heads: rank {rank} holds kv heads {want}, "
                                 f"not {got}; query head h reads kv head h // (n_heads // n_kv_heads), and a rank "
                                 "holds the kv heads its own q heads read")
    return f"matches QKVParallelLinear on {sum(tp for tp, _, _ in CASES)} (rank, layout) cases, replicated kv heads included"


def check_greedy_from_shards(greedy_from_shards) -> str:
    """10.2: greedy_from_shards(list of [rows, V/tp] logits) must equal the argmax of the full logits."""
    gen = torch.Generator().manual_seed(10)
    for tp in (2, 4):
        logits = torch.randn(5, 24, generator=gen)
        logits[0, 23] = 50.0  # the best token sits in the last rank's slice
        logits[1, 2] = 50.0  # ... and in the first rank's slice
        got = torch.as_tensor(greedy_from_shards(list(logits.chunk(tp, dim=-1))))
        assert got.shape == (5,), f"hint: one token id per row, shape (5,), got {tuple(got.shape)}"
        assert torch.equal(got.long(), logits.argmax(-1)), \
            "hint: a rank's local argmax is an index into its slice; add the slice's first id (rank * vocab / tp)"
    return "equals the argmax of the full logits at tp=2 and tp=4"


def _full_shape(tensor) -> tuple:
    """The shape of a checkpoint tensor, or of a lazy safetensors slice of one."""
    return tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else tuple(tensor.get_shape())


def layers_with_shard_range(shard_range):
    """Column, merged, row and vocab-parallel layers whose loaders take the rows or columns `shard_range` names."""
    from nanoserve.model.layers import copy_into
    from nanoserve.parallel.layers import (ColumnParallelLinear, MergedColumnParallelLinear, ParallelLMHead,
                                           RowParallelLinear, VocabParallelEmbedding, narrow)

    def take(kind, layer, tensor):
        dim, start, size = shard_range(kind, _full_shape(tensor), layer.group.rank, layer.group.size)
        return narrow(tensor, dim, start, size)

    class ReadersColumn(ColumnParallelLinear):
        """ColumnParallelLinear loading the reader's shard."""

        def weight_loader(self, param, tensor, shard_id=None):
            copy_into(param.data, take("column", self, tensor))

    class ReadersMerged(MergedColumnParallelLinear):
        """MergedColumnParallelLinear: every stacked shard (gate, up) cut by the reader's column rule."""

        def weight_loader(self, param, tensor, shard_id=None):
            offset, size = self.shard_range(shard_id)
            copy_into(param.data[offset:offset + size], take("column", self, tensor))

    class ReadersRow(RowParallelLinear):
        """RowParallelLinear loading the reader's shard of the weight (the bias is whole on every rank)."""

        def weight_loader(self, param, tensor, shard_id=None):
            if param.dim() == 1:
                return super().weight_loader(param, tensor, shard_id)
            copy_into(param.data, take("row", self, tensor))

    class VocabLoader:
        """The vocab-parallel loader: the reader's rows first, the block's padding rows zero."""

        def weight_loader(self, param, tensor, shard_id=None):
            rows = take("vocab", self, tensor)
            with torch.no_grad():
                param.data[len(rows):].zero_()
            copy_into(param.data[:len(rows)], rows)

    class ReadersVocab(VocabLoader, VocabParallelEmbedding):
        """VocabParallelEmbedding loading the reader's block of the vocabulary."""

    class ReadersLMHead(VocabLoader, ParallelLMHead):
        """ParallelLMHead loading the reader's block of the vocabulary."""

    return {"ColumnParallelLinear": ReadersColumn, "MergedColumnParallelLinear": ReadersMerged,
            "RowParallelLinear": ReadersRow, "VocabParallelEmbedding": ReadersVocab, "ParallelLMHead": ReadersLMHead}


def _shard_cases() -> list:
    """(layer class name, constructor arguments, full checkpoint shape, what) for every loader the exercise covers."""
    return [("ColumnParallelLinear", (8, 12), (12, 8), "a column-parallel weight [12, 8]"),
            ("MergedColumnParallelLinear", (8, [16, 16]), (16, 8), "gate_up's gate and up [16, 8] each"),
            ("RowParallelLinear", (12, 8), (8, 12), "a row-parallel weight [8, 12]"),
            ("VocabParallelEmbedding", (101, 6), (101, 6), "an embedding of 101 ids (the last block padded)"),
            ("VocabParallelEmbedding", (96, 6), (96, 6), "an embedding of 96 ids"),
            ("ParallelLMHead", (5, 6), (5, 6), "an LM head of 5 ids (more ranks than some blocks need)")]


def check_shard_range(shard_range) -> str:
    """14.5 (build it yourself): the rows or columns each rank's column, row and vocab loaders take of a full weight."""
    import nanoserve.parallel.layers as package

    readers = layers_with_shard_range(shard_range)
    hints = {"ColumnParallelLinear": "a column-parallel rank keeps output rows (dim 0): out / tp of them, from rank·out/tp",
             "MergedColumnParallelLinear": "each stacked shard (gate, then up) is split like a column-parallel weight",
             "RowParallelLinear": "a row-parallel rank keeps input columns (dim 1): in / tp of them, from rank·in/tp",
             "VocabParallelEmbedding": "every rank owns a block of ceil(vocab / tp) ids from rank·block; the last "
                                       "blocks hold fewer real rows (or none), never rows past the vocabulary",
             "ParallelLMHead": "the LM head splits the vocabulary exactly as the embedding does"}
    for name, args, shape, what in _shard_cases():
        full = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)  # every entry labelled
        shard_ids = ([0, 1] if name == "MergedColumnParallelLinear" else [None])
        for tp in (1, 2, 4):
            for rank in range(tp):
                group = TPGroup(rank, tp, process_group=None if tp == 1 else "placeholder: no collectives")
                ours, yours = getattr(package, name)(*args, group=group), readers[name](*args, group=group)
                for shard_id in shard_ids:
                    for layer in (ours, yours):
                        tensor = full if shard_id is None else full + 1000 * shard_id
                        try:
                            layer.weight.weight_loader(layer.weight, tensor, shard_id)
                        except (ValueError, IndexError, TypeError) as err:
                            raise AssertionError(f"hint: {what}, tp={tp}: rank {rank}'s shard does not fit its "
                                                 f"weight {tuple(layer.weight.shape)} ({err}); {hints[name]}") from None
                assert torch.equal(yours.weight.data, ours.weight.data), (
                    f"hint: {what}, tp={tp}: rank {rank} loaded the wrong entries; {hints[name]}")
    for rank in range(2):  # a whole checkpoint, read rank by rank through lazy safetensors slices
        ours, yours = (_tiny_rank_params(rank, layers) for layers in (package.ShardedLayers, sharded_layers_with(readers)))
        wrong = [name for name in ours if not torch.equal(ours[name], yours[name])]
        assert not wrong, f"hint: loading a tiny Qwen3 checkpoint as rank {rank} of 2, these differ: {wrong[:4]}"
    return ("every rank loads the same shard as the chapter's layers at tp 1, 2 and 4, and a whole checkpoint "
            "through lazy slices; set USE_MY_SHARD_RANGE = True")


def sharded_layers_with(readers: dict):
    """ShardedLayers whose merged, row, embedding and LM-head layers are the reader's (qkv stays the chapter's)."""
    from nanoserve.parallel.layers import ShardedLayers

    class ReadersShardedLayers(ShardedLayers):
        """The layer factory of one rank, loading through the reader's shard ranges."""

        def merged(self, in_features, out_sizes, bias=False):
            return readers["MergedColumnParallelLinear"](in_features, list(out_sizes), bias, self.group)

        def row(self, in_features, out_features, bias=False):
            return readers["RowParallelLinear"](in_features, out_features, bias, self.group)

        def embedding(self, vocab_size, hidden):
            return readers["VocabParallelEmbedding"](vocab_size, hidden, self.group)

        def lm_head(self, vocab_size, hidden, tied=None):
            return readers["ParallelLMHead"](vocab_size, hidden, tied, self.group)

    return ReadersShardedLayers


def _tiny_rank_params(rank: int, layers_class) -> dict:
    """Every parameter of a tiny Qwen3 as rank `rank` of 2 loads it with `layers_class` (no collective runs)."""
    from nanoserve.model.loader import load_qwen3

    from course.exercises.ch11 import _tiny_checkpoint

    group = TPGroup(rank, 2, process_group="placeholder: no collectives")
    model = load_qwen3(_tiny_checkpoint(), dtype=torch.float32, layers=layers_class(group))
    return {name: p.detach() for name, p in model.named_parameters()}


CHECKS = {"14.1": check_kv_heads_of_rank, "14.2": check_greedy_from_shards, "14.5": check_shard_range}
