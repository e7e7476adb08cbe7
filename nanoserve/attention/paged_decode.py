"""Decode attention as a graph variant: one query per sequence over static block tables (chapter 08)."""
import bisect
from dataclasses import dataclass

import numpy as np
import torch

from .batch import AttentionBatch


@dataclass
class GraphPlan:
    """How a variant's graph takes a step: the bucket it replays, and the rows' order (None: the step's own)."""

    bucket: int
    order: np.ndarray | None = None
    state: object = None  # anything the variant's `stage` needs (computed once, in `plan`)


def pick_bucket(size: int, buckets: list) -> int | None:
    """The smallest bucket that holds `size`, or None."""
    i = bisect.bisect_left(buckets, size)
    return buckets[i] if i < len(buckets) else None


def stage_tables(out: np.ndarray, tables: np.ndarray) -> None:
    """Copy block tables into a captured-width view, refusing tables that do not fit."""
    width = out.shape[1]
    if tables.shape[1] > width:
        if (tables[:, width:] >= 0).any():
            raise ValueError(f"a block table exceeds the captured width {width}")
        tables = tables[:, :width]
    out[:len(tables), :tables.shape[1]] = tables


class PagedDecode:
    """Graph variant for pure decode steps: the backend's decode kernel; padding lanes read block 0, write nowhere."""

    name = "decode"

    def __init__(self, backend, buckets: list, max_model_len: int, block_size: int):
        self.backend, self.buckets = backend, sorted(buckets)
        self.max_model_len, self.width = max_model_len, -(-max_model_len // block_size)

    def logits_rows(self, bucket: int) -> int:
        """One sampled row per lane."""
        return bucket

    def fields(self) -> list:
        """(name, dtype, shape, padding) of the metadata this variant stages."""
        n = self.buckets[-1]
        return [("context_lens", np.int32, (n,), 1), ("cu_seqlens_k", np.int32, (n + 1,), 0),
                ("block_tables", np.int32, (n, self.width), -1)]

    def plan(self, step) -> GraphPlan | None:
        """A bucket for a pure decode step that fits one, else None."""
        bucket = pick_bucket(step.num_tokens, self.buckets) if step.is_decode else None
        return None if bucket is None else GraphPlan(bucket)

    def batch(self, common, own, bucket: int, kv_caches: list) -> AttentionBatch:
        """The AttentionBatch a bucket's graph reads: views of the static buffers."""
        cu_q = torch.arange(bucket + 1, dtype=torch.int32, device=own["context_lens"].device)
        return AttentionBatch(common["slot_mapping"][:bucket], cu_q, own["cu_seqlens_k"][:bucket + 1], 1,
                              self.max_model_len, own["context_lens"][:bucket], own["block_tables"][:bucket],
                              kv_caches, self.backend, is_decode=True)

    def stage(self, views: dict, step, plan: GraphPlan) -> None:
        """A decode step's context lengths and block tables; padding lanes keep context 1 over block 0."""
        n = step.num_tokens
        views["context_lens"][:n] = step.context_lens.numpy()
        np.cumsum(views["context_lens"], out=views["cu_seqlens_k"][1:])
        stage_tables(views["block_tables"], step.block_tables.numpy())
        views["block_tables"][n:, 0] = 0
