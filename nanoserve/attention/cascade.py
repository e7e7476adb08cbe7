"""Cascade attention as a graph variant: decode steps whose sequences share cached prefix blocks (chapter 09)."""
import dataclasses

import numpy as np
import torch

from .batch import AttentionBatch
from .flash import flash_functions
from .paged_decode import GraphPlan, pick_bucket
from .torch_ref import gather_context

CASCADE_MIN_LANES = 16  # the smallest bucket that gets a cascade graph
CASCADE_MIN_SHARED_READS = 32768  # (members - 1) x prefix tokens: the per-sequence reads a cascade must save


def common_prefix_blocks(block_tables: np.ndarray, context_lens: np.ndarray, block_size: int) -> int:
    """Leading block-table columns every row shares, stopping before any row's newest token."""
    limit = max(0, (int(context_lens.min()) - 1) // block_size)
    same = (block_tables[:, :limit] == block_tables[:1, :limit]).all(axis=0) & (block_tables[0, :limit] >= 0)
    return int(limit if same.all() else same.argmin())


def shared_prefix(block_tables: np.ndarray, context_lens: np.ndarray, block_size: int) -> tuple:
    """(blocks, members): the rows whose first block is the most common one, and the blocks they all share."""
    first = block_tables[:, 0]
    ids, counts = np.unique(first[first >= 0], return_counts=True)
    if not len(ids):
        return 0, np.zeros(len(first), dtype=bool)
    members = first == ids[counts.argmax()]
    return common_prefix_blocks(block_tables[members], context_lens[members], block_size), members

# %% cell: merge
def merge_attention(out_a, lse_a, out_b, lse_b):
    """Attention over two disjoint key sets -> attention over their union; outs [T, H, D], lses [T, H] float32."""
    lse = torch.logaddexp(lse_a, lse_b)
    weight_a, weight_b = (lse_a - lse).exp().unsqueeze(-1), (lse_b - lse).exp().unsqueeze(-1)
    return (out_a.float() * weight_a + out_b.float() * weight_b).to(out_a.dtype)


def attend_with_lse(q, k, v):
    """Plain attention of queries [T, H, D] over keys/values [S, Hkv, D], no mask: (out, lse [T, H])."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(groups, dim=1), v.float().repeat_interleave(groups, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * q.shape[-1] ** -0.5
    out = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v)
    return out.to(q.dtype), scores.logsumexp(dim=-1).t()


class TorchCascadeKernels:
    """The two halves of cascade attention in plain torch (CPU, tests): loops, float32."""

    @staticmethod
    def prefix(q, k_cache, v_cache, batch):
        """Every row of q against the shared prefix blocks."""
        k, v = gather_context(k_cache, v_cache, batch.block_tables[0], int(batch.cu_seqlens_k[1]))
        return attend_with_lse(q, k, v)

    @staticmethod
    def suffix(q, k_cache, v_cache, batch):
        """Each row of q against its own blocks after the prefix (its context length, its table)."""
        outs, lses = zip(*(attend_with_lse(q[i:i + 1], *gather_context(k_cache, v_cache, batch.block_tables[i], n))
                           for i, n in enumerate(batch.context_lens.tolist())))
        return torch.cat(outs), torch.cat(lses)


class FlashCascadeKernels:
    """The two halves with flash-attn: the varlen kernel (all rows as one sequence) and the decode kernel."""

    @staticmethod
    def prefix(q, k_cache, v_cache, batch):
        varlen, _ = flash_functions()
        out, lse, _ = varlen(q, k_cache, v_cache, batch.cu_seqlens_q, batch.cu_seqlens_k, batch.max_seqlen_q,
                             batch.max_seqlen_k, causal=False, block_table=batch.block_tables, return_attn_probs=True)
        return out, lse.t()

    @staticmethod
    def suffix(q, k_cache, v_cache, batch):
        _, with_kvcache = flash_functions()
        out, lse = with_kvcache(q.unsqueeze(1), k_cache, v_cache, cache_seqlens=batch.context_lens,
                                block_table=batch.block_tables, causal=True, return_softmax_lse=True)
        return out.squeeze(1), lse.squeeze(-1)


CASCADE_KERNELS = {"torch": TorchCascadeKernels, "flash": FlashCascadeKernels}

# %% cell: variant
@dataclasses.dataclass
class CascadeBatch:
    """A cascade decode step's attention inputs: the shared prefix (all rows, one sequence) and each suffix."""

    slot_mapping: torch.Tensor
    prefix: AttentionBatch
    suffix: AttentionBatch
    members: torch.Tensor  # [lanes] int32: 1 where the lane's context starts with the shared prefix
    kv_caches: list
    backend: "CascadeDecode"


class CascadeDecode:
    """Graph variant for decode steps sharing a prefix: the prefix attended once, each suffix on its own, merged
    by their log-sum-exp; lanes that do not share it get a prefix weight of 0."""

    name = "cascade"

    def __init__(self, backend, buckets: list, max_model_len: int, block_size: int,
                 min_shared_reads: int = CASCADE_MIN_SHARED_READS):
        if backend.name not in CASCADE_KERNELS:
            raise ValueError(f"no cascade kernels for the {backend.name!r} attention backend")
        self.backend, self.kernels = backend, CASCADE_KERNELS[backend.name]
        self.buckets = sorted(b for b in buckets if b >= CASCADE_MIN_LANES)
        if not self.buckets:
            raise ValueError(f"cascade attention needs a bucket of at least {CASCADE_MIN_LANES} lanes")
        self.block_size, self.max_model_len = block_size, max_model_len
        self.width, self.min_shared_reads = -(-max_model_len // block_size), min_shared_reads

    def forward(self, q, k, v, layer_idx, batch: CascadeBatch):
        """Store k/v, attend the prefix and the suffixes, merge."""
        k_cache, v_cache = batch.kv_caches[layer_idx]
        self.backend.store(k, v, k_cache, v_cache, batch.slot_mapping)
        shared, shared_lse = self.kernels.prefix(q, k_cache, v_cache, batch.prefix)
        shared_lse = shared_lse.masked_fill(batch.members[:, None] == 0, float("-inf"))  # not a member: weight 0
        own, own_lse = self.kernels.suffix(q, k_cache, v_cache, batch.suffix)
        return merge_attention(shared, shared_lse, own, own_lse)

    def logits_rows(self, bucket: int) -> int:
        return bucket

    def fields(self) -> list:
        n, w = self.buckets[-1], self.width
        return [("suffix_tables", np.int32, (n, w), 0), ("suffix_lens", np.int32, (n,), 1),
                ("prefix_table", np.int32, (1, w), 0), ("prefix_cu_k", np.int32, (2,), [0, self.block_size]),
                ("members", np.int32, (n,), 0)]

    def plan(self, step) -> GraphPlan | None:
        """A bucket when this decode step's shared prefix saves enough reads, else None (plain decode)."""
        n = step.num_tokens
        if not step.is_decode or n < CASCADE_MIN_LANES:
            return None
        bucket = pick_bucket(n, self.buckets)
        if bucket is None:
            return None
        tables, context = step.block_tables.numpy(), step.context_lens.numpy()
        shared, members = shared_prefix(tables, context, self.block_size)
        if shared == 0 or (members.sum() - 1) * shared * self.block_size < self.min_shared_reads:
            return None
        return GraphPlan(bucket, state=(shared, members))

    def batch(self, common, own, bucket: int, kv_caches: list) -> CascadeBatch:
        """Views of the static buffers: the prefix as one sequence of `bucket` queries, and `bucket` suffix lanes."""
        rows = torch.tensor([0, bucket], dtype=torch.int32, device=own["prefix_cu_k"].device)
        prefix = AttentionBatch(None, rows, own["prefix_cu_k"], bucket, self.max_model_len, None, own["prefix_table"],
                                kv_caches, self.backend)
        suffix = AttentionBatch(None, None, None, 1, self.max_model_len, own["suffix_lens"][:bucket],
                                own["suffix_tables"][:bucket], kv_caches, self.backend, is_decode=True)
        return CascadeBatch(common["slot_mapping"][:bucket], prefix, suffix, own["members"][:bucket], kv_caches, self)

    def stage(self, views: dict, step, plan: GraphPlan) -> None:
        """Members' suffix tables start after the prefix; the others keep their whole table."""
        (shared, members), n = plan.state, step.num_tokens
        tables, context = step.block_tables.numpy(), step.context_lens.numpy()
        skip = np.where(members, shared, 0)
        columns = skip[:, None] + np.arange(views["suffix_tables"].shape[1])  # each lane's table, shifted left
        inside = columns < tables.shape[1]
        views["suffix_tables"][:n] = np.where(inside, np.take_along_axis(
            tables, np.minimum(columns, tables.shape[1] - 1), axis=1), 0)
        views["suffix_lens"][:n] = context - skip * self.block_size
        views["members"][:n] = members
        views["prefix_table"][0, :shared] = tables[members][0, :shared]
        views["prefix_cu_k"][1] = shared * self.block_size
