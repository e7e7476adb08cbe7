"""Prefill and mixed steps as a graph variant: decode lanes first, then prompt chunks cut into pieces (chapter 09)."""
import dataclasses

import numpy as np
import torch

from .batch import AttentionBatch
from .paged_decode import GraphPlan, pick_bucket, stage_tables

PIECE_LEN = 128  # query rows per attention piece: one flash-attn tile of rows


@dataclasses.dataclass
class MixedLayout:
    """A mixed step's rows in graph order: one-query sequences first (decode lanes), then prefill pieces."""

    order: np.ndarray         # [T] the step's row that each graph row takes
    lane_seqs: np.ndarray     # [L] the sequence of each decode lane (graph rows 0..L-1)
    piece_seqs: np.ndarray    # [P] the sequence each piece belongs to
    piece_starts: np.ndarray  # [P+1] graph row where each piece starts, then T
    piece_keys: np.ndarray    # [P] keys each piece attends: its sequence's context up to its last query


def plan_mixed_layout(step, piece_len: int = PIECE_LEN) -> MixedLayout:
    """Decode lanes first, then every longer chunk cut into pieces of at most `piece_len` queries."""
    q_lens = np.diff(step.cu_seqlens_q.numpy().astype(np.int64))
    one = q_lens == 1
    row_is_lane = np.repeat(one, q_lens)
    order = np.concatenate([np.flatnonzero(row_is_lane), np.flatnonzero(~row_is_lane)])
    lane_seqs, long = np.flatnonzero(one), np.flatnonzero(q_lens > 1)
    lens = q_lens[long]
    counts = -(-lens // piece_len)  # pieces per chunk
    index = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)  # piece number in its chunk
    first_row = len(lane_seqs) + np.cumsum(lens) - lens  # graph row of each chunk's first query
    rows = np.minimum(piece_len, np.repeat(lens, counts) - index * piece_len)
    cached = step.context_lens.numpy()[long].astype(np.int64) - lens  # keys before the chunk
    return MixedLayout(order=order, lane_seqs=lane_seqs, piece_seqs=np.repeat(long, counts),
                       piece_starts=np.append(np.repeat(first_row, counts) + index * piece_len, len(order)),
                       piece_keys=np.repeat(cached, counts) + index * piece_len + rows)

# %% cell: attention
@dataclasses.dataclass
class MixedStepBatch:
    """A mixed-step graph's attention inputs: decode lanes over the first rows, prefill pieces over the rest."""

    slot_mapping: torch.Tensor
    lanes: AttentionBatch    # one query each, rows 0..len(lanes.context_lens)-1
    pieces: AttentionBatch   # <= PIECE_LEN queries each; cu_seqlens_q starts after the lanes
    is_lane: torch.Tensor    # [lane rows] int32: 1 where the row is a real decode lane this step
    kv_caches: list
    backend: "MixedStep"


class MixedStep:
    """Graph variant for prefill and mixed steps: the decode kernel on the lanes, the varlen kernel on the pieces."""

    name = "mixed"

    def __init__(self, backend, buckets: list, max_seqs: int, max_model_len: int, block_size: int):
        self.backend, self.buckets, self.max_seqs = backend, sorted(buckets), max_seqs
        self.max_model_len, self.width = max_model_len, -(-max_model_len // block_size)

    def forward(self, q, k, v, layer_idx, batch: MixedStepBatch):
        """Store k/v once, attend pieces and lanes, keep the lane result on the rows that are lanes."""
        k_cache, v_cache = batch.kv_caches[layer_idx]
        self.backend.store(k, v, k_cache, v_cache, batch.slot_mapping)
        out = self.backend.varlen(q, k_cache, v_cache, batch.pieces)
        n = batch.is_lane.numel()
        lanes = self.backend.decode(q[:n], k_cache, v_cache, batch.lanes)
        out[:n] = torch.where(batch.is_lane[:, None, None] != 0, lanes, out[:n])
        return out

    def logits_rows(self, bucket: int) -> int:
        """Decode-lane rows of a bucket, and its sampled rows: at most one per sequence."""
        return min(self.max_seqs, bucket)

    def pieces_for(self, bucket: int) -> int:
        """Piece slots of a bucket: enough for any split of `bucket` rows among `max_seqs` sequences."""
        return min(self.max_seqs, bucket // 2) + bucket // PIECE_LEN

    def fields(self) -> list:
        """(name, dtype, shape, padding) of the lane and piece metadata, for the largest bucket."""
        t = self.buckets[-1]
        lanes, pieces, w = self.logits_rows(t), self.pieces_for(t), self.width
        return [("is_lane", np.int32, (lanes,), 0), ("lane_context_lens", np.int32, (lanes,), 1),
                ("lane_block_tables", np.int32, (lanes, w), 0), ("piece_cu_q", np.int32, (pieces + 1,), 0),
                ("piece_cu_k", np.int32, (pieces + 1,), 0), ("piece_context_lens", np.int32, (pieces,), 0),
                ("piece_block_tables", np.int32, (pieces, w), 0)]

    def plan(self, step) -> GraphPlan | None:
        """A bucket and the lane/piece layout for a prefill or mixed step, else None."""
        if step.is_decode or len(step.context_lens) > self.max_seqs:
            return None
        bucket = pick_bucket(step.num_tokens, self.buckets)
        if bucket is None:
            return None
        layout = plan_mixed_layout(step)
        return GraphPlan(bucket, layout.order, layout)

    def batch(self, common, own, bucket: int, kv_caches: list) -> MixedStepBatch:
        """The attention inputs of `bucket`: slices of the static buffers."""
        lanes, pieces = self.logits_rows(bucket), self.pieces_for(bucket)
        lane_batch = AttentionBatch(None, None, None, 1, self.max_model_len, own["lane_context_lens"][:lanes],
                                    own["lane_block_tables"][:lanes], kv_caches, self.backend, is_decode=True)
        piece_batch = AttentionBatch(None, own["piece_cu_q"][:pieces + 1], own["piece_cu_k"][:pieces + 1], PIECE_LEN,
                                     self.max_model_len, own["piece_context_lens"][:pieces],
                                     own["piece_block_tables"][:pieces], kv_caches, self.backend)
        return MixedStepBatch(common["slot_mapping"][:bucket], lane_batch, piece_batch, own["is_lane"][:lanes],
                              kv_caches, self)

    def stage(self, x: dict, step, plan: GraphPlan) -> None:
        """Lanes and pieces of the layout; padding pieces are empty, padding lanes read block 0."""
        layout, t = plan.state, step.num_tokens
        context_lens, tables = step.context_lens.numpy(), step.block_tables.numpy()
        n, p = len(layout.lane_seqs), len(layout.piece_seqs)
        x["is_lane"][:n] = 1
        x["lane_context_lens"][:n] = context_lens[layout.lane_seqs]
        stage_tables(x["lane_block_tables"], tables[layout.lane_seqs])
        x["piece_cu_q"][:p + 1], x["piece_cu_q"][p + 1:] = layout.piece_starts, t
        x["piece_cu_k"][1:p + 1] = np.cumsum(layout.piece_keys)
        x["piece_cu_k"][p + 1:] = x["piece_cu_k"][p]
        x["piece_context_lens"][:p] = layout.piece_keys
        stage_tables(x["piece_block_tables"], tables[layout.piece_seqs])
