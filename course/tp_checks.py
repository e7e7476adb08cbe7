"""Teaching aid for chapter 14 and tests/dist, run on every rank of a RankPool: layer and model parity with dense.

A module, not notebook cells, because a spawned worker must import what it runs; the engine never calls it.
"""
from __future__ import annotations

import torch

from nanoserve.model.layers import DenseLayers, Linear
from nanoserve.parallel.layers import ColumnParallelLinear, ShardedLayers


def _dense_and_sharded(ctx, kind: str, dims: dict):
    """The same layer built whole and split over ctx.group."""
    if kind == "column":
        return Linear(dims["hidden"], dims["inter"], True), ColumnParallelLinear(dims["hidden"], dims["inter"], True, ctx.group)
    make = {
        "qkv": lambda f: f.qkv(dims["hidden"], dims["head_dim"], dims["n_heads"], dims["n_kv_heads"], True),
        "merged": lambda f: f.merged(dims["hidden"], [dims["inter"], dims["inter"]]),
        "row": lambda f: f.row(dims["inter"], dims["hidden"], True),
        "embedding": lambda f: f.embedding(dims["vocab"], dims["hidden"]),
        "lm_head": lambda f: f.lm_head(dims["vocab"], dims["hidden"]),
    }[kind]
    return make(DenseLayers()), make(ShardedLayers(ctx.group))


def _load_both(dense, sharded, gen: torch.Generator) -> None:
    """Draw full random tensors and load them into both layers through their weight loaders."""
    for (_, p_dense), (_, p_sharded) in zip(dense.named_parameters(), sharded.named_parameters()):
        for shard_id in getattr(p_dense, "shard_ids", (None,)):
            rows = p_dense.shape[0] if shard_id is None else dense.shard_sizes[shard_id]
            full = torch.randn((rows, *p_dense.shape[1:]), generator=gen)
            p_dense.weight_loader(p_dense, full, shard_id)
            p_sharded.weight_loader(p_sharded, full, shard_id)


def _gather_columns(group, layer, y: torch.Tensor):
    """Reassemble a column-parallel output in the dense layout (stacked shards are interleaved per rank)."""
    parts = group.gather_to_first(y.unsqueeze(0), dim=0)
    if parts is None:
        return None
    sizes = list(getattr(layer, "shard_sizes", {None: y.shape[-1]}).values())
    per_part = [p.split(sizes, dim=-1) for p in parts]  # [rank][shard]
    return torch.cat([torch.cat([per_part[r][i] for r in range(group.size)], dim=-1) for i in range(len(sizes))], dim=-1)


def layer_parity(ctx, dims: dict, seed: int = 0) -> dict | None:
    """Max |dense − sharded| per layer kind on rank 0 (None on the others); column outputs are gathered first."""
    gen = torch.Generator().manual_seed(seed)
    group, errors = ctx.group, {}
    for kind in ("column", "qkv", "merged", "row", "embedding", "lm_head"):
        dense, sharded = _dense_and_sharded(ctx, kind, dims)
        _load_both(dense, sharded, gen)
        if kind == "embedding":
            x = torch.randint(0, dims["vocab"], (dims["tokens"],), generator=gen)
        else:
            x = torch.randn(dims["tokens"], dims["inter"] if kind == "row" else dims["hidden"], generator=gen)
        if kind == "row":  # a row-parallel layer receives only its slice of the input features
            n = sharded.in_features
            want, got = dense(x), sharded(x[:, group.rank * n:(group.rank + 1) * n])
        elif kind in ("column", "qkv", "merged"):  # gather the slices to compare whole outputs
            want, got = dense(x), _gather_columns(group, sharded, sharded(x))
        else:
            want, got = dense(x), sharded(x)
        if group.is_first:
            errors[kind] = (want - got).abs().max().item()
    return errors if group.is_first else None


def sharded_logits(ctx, model_path, token_ids: list) -> torch.Tensor | None:
    """Logits of one sequence from a Qwen3 model whose every rank loads only its shard (rank 0 gets them)."""
    from nanoserve.model.loader import load_qwen3

    model = load_qwen3(model_path, dtype=torch.float32, layers=ShardedLayers(ctx.group))
    ids = torch.tensor(token_ids)
    with torch.inference_mode():
        return model.compute_logits(model(ids, torch.arange(len(ids))))
