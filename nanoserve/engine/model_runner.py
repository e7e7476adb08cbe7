"""Turn a scheduled batch into flat tensors, run the model on them, sample the next tokens (chapter 06)."""
import itertools
import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from ..attention.batch import AttentionBatch, allocate_kv_cache
from .config import gpu_kv_cache_bytes, head_dim_of, kv_block_bytes
from ..model.loader import load_weights
from ..model.qwen3 import Qwen3ForCausalLM
from ..sampler import Sampler, SamplerOutput, SamplingBatch, sample_batch
from ..sampling import SamplingParams
from .sequence import SequenceStatus

_logger = logging.getLogger(__name__)


@dataclass
class StepInputs:
    """One step's model inputs as plain CPU tensors (picklable: tensor-parallel workers receive it)."""

    input_ids: torch.Tensor       # [T] int64: the new tokens of every sequence, back to back
    positions: torch.Tensor       # [T] int64: each token's position in its own sequence
    slot_mapping: torch.Tensor    # [T] int64: the KV-cache slot each new token is written to
    cu_seqlens_q: torch.Tensor    # [B+1] int32
    cu_seqlens_k: torch.Tensor    # [B+1] int32
    max_seqlen_q: int
    max_seqlen_k: int
    context_lens: torch.Tensor    # [B] int32: cached + new tokens per sequence
    block_tables: torch.Tensor    # [B, max_blocks] int32, -1 past each table's end
    logits_indices: torch.Tensor  # [S + P] int64: the row of each sampling sequence's last token, then prompt rows
    is_decode: bool
    token_rows: torch.Tensor | None = None    # [T] int64: the token-table slot a row's input id is read from, or -1
    sample_slots: torch.Tensor | None = None  # [S] int64: the token-table slot each sampled token is written to

    @property
    def num_tokens(self) -> int:
        """T, the number of new tokens in the step."""
        return self.input_ids.numel()


def build_step_inputs(token_chunks: list, starts: list, block_tables: list, samples: list,
                      block_size: int) -> StepInputs:
    """StepInputs for sequences whose new tokens `token_chunks[b]` start at position `starts[b]`."""
    # numpy, not torch: each torch op costs microseconds of dispatch, a numpy op on a few hundred
    # ints far less, and torch.from_numpy at the end shares the memory without a copy
    num_seqs = len(token_chunks)
    q_lens = np.fromiter(map(len, token_chunks), np.int64, num_seqs)
    start = np.asarray(starts, dtype=np.int64)
    cu_q = np.zeros(num_seqs + 1, np.int64)
    np.cumsum(q_lens, out=cu_q[1:])
    context_lens = start + q_lens
    cu_k = np.zeros(num_seqs + 1, np.int64)
    np.cumsum(context_lens, out=cu_k[1:])
    table_lens = np.fromiter(map(len, block_tables), np.int64, num_seqs)
    tables = np.full((num_seqs, int(table_lens.max())), -1, np.int32)
    tables[np.arange(tables.shape[1]) < table_lens[:, None]] = np.fromiter(
        itertools.chain.from_iterable(block_tables), np.int32, int(table_lens.sum()))  # row-major fill
    num_tokens = int(cu_q[-1])
    if num_tokens == num_seqs:  # pure decode: token b belongs to sequence b
        seq_of_token, positions = np.arange(num_seqs), start
    else:  # token -> its sequence, then its position, all without a per-token Python loop
        seq_of_token = np.repeat(np.arange(num_seqs), q_lens)
        positions = np.arange(num_tokens) - cu_q[seq_of_token] + start[seq_of_token]
    slot_mapping = tables[seq_of_token, positions // block_size].astype(np.int64) * block_size + positions % block_size
    input_ids = np.fromiter(itertools.chain.from_iterable(token_chunks), np.int64, num_tokens)
    return StepInputs(
        input_ids=torch.from_numpy(input_ids),
        positions=torch.from_numpy(positions),
        slot_mapping=torch.from_numpy(slot_mapping),
        cu_seqlens_q=torch.from_numpy(cu_q.astype(np.int32)),
        cu_seqlens_k=torch.from_numpy(cu_k.astype(np.int32)),
        max_seqlen_q=int(q_lens.max()),
        max_seqlen_k=int(context_lens.max()),
        context_lens=torch.from_numpy(context_lens.astype(np.int32)),
        block_tables=torch.from_numpy(tables),
        logits_indices=torch.from_numpy(cu_q[1:][np.asarray(samples, dtype=bool)] - 1),
        is_decode=num_tokens == num_seqs,
    )

# %% cell: pack
def pack_to_device(tensors: list, device: torch.device) -> list:
    """CPU tensors -> the same on `device` with ONE host-to-device copy (packed in pinned memory, then viewed)."""
    if device.type == "cpu":
        return list(tensors)
    offsets, total = [], 0
    for t in tensors:  # 8-byte aligned sections, so every dtype can view its own
        offsets.append(total)
        total += -(-t.numel() * t.element_size() // 8) * 8
    # a fresh pinned block each step: torch's caching host allocator hands it back only after the copy ran
    host = torch.empty(max(total, 8), dtype=torch.uint8, pin_memory=device.type == "cuda")
    staging = host.numpy()
    for t, offset in zip(tensors, offsets):
        raw = t.numpy().reshape(-1).view(np.uint8)
        staging[offset:offset + raw.size] = raw
    packed = host.to(device, non_blocking=True)
    return [packed[o:o + t.numel() * t.element_size()].view(t.dtype).view(t.shape) for t, o in zip(tensors, offsets)]

# %% cell: token table
class TokenTable:
    """The newest sampled token of each live sequence, kept on the device: a decode reads its input id there,
    so a sampled token never has to travel to the host and back before the next step can use it."""

    def __init__(self, capacity: int, device):
        self.capacity = capacity
        self.tokens = torch.zeros(capacity + 1, dtype=torch.int64, device=device)  # the last slot: scratch for padding
        self._slots: dict = {}  # seq_id -> (slot, seq)
        self._free = list(range(capacity - 1, -1, -1))

    def slot_of(self, seq) -> int:
        """The sequence's slot, or -1 when it has none (it has not sampled, or its slot was reclaimed)."""
        entry = self._slots.get(seq.seq_id)
        return -1 if entry is None else entry[0]

    def assign(self, seq) -> int:
        """The sequence's slot, taking a free one the first time it samples."""
        entry = self._slots.get(seq.seq_id)
        if entry is not None:
            return entry[0]
        if not self._free:
            self._reclaim()
        slot = self._free.pop()
        self._slots[seq.seq_id] = (slot, seq)
        return slot

    def _reclaim(self) -> None:
        """Free the slots of sequences no longer running (finished, or preempted: they recompute from the host)."""
        for seq_id, (slot, seq) in list(self._slots.items()):
            if seq.status is not SequenceStatus.RUNNING:
                del self._slots[seq_id]
                self._free.append(slot)
        if not self._free:
            raise RuntimeError(f"more than {self.capacity} running sequences hold token-table slots")


def prepare_step_inputs(batch, sampling: SamplingBatch | None, block_size: int, table: TokenTable | None = None
                        ) -> StepInputs:
    """The step's inputs for a ScheduledBatch (blocks for the new tokens are already allocated). With a token
    table, each sequence's newest token is read from it and each sampled token is written to it; rows asking
    for prompt logprobs get logits rows after the sampling rows."""
    chunks, starts = [], []
    for seq, n in zip(batch.seqs, batch.num_new_tokens):
        start = seq.num_computed_tokens
        chunk = seq.token_ids[start:start + n]
        chunks.append(chunk if len(chunk) == n else chunk + [0] * (n - len(chunk)))  # not on the host yet: the table has it
        starts.append(start)
    step = build_step_inputs(chunks, starts, [s.block_table for s in batch.seqs], batch.samples, block_size)
    if table is not None:
        slots = np.fromiter((table.slot_of(s) for s in batch.seqs), np.int64, len(batch.seqs))
        newest = np.fromiter((s.num_computed_tokens + n == s.num_tokens for s, n in zip(batch.seqs, batch.num_new_tokens)),
                             bool, len(batch.seqs)) & (slots >= 0)
        rows = np.full(step.num_tokens, -1, np.int64)
        rows[step.cu_seqlens_q.numpy()[1:][newest].astype(np.int64) - 1] = slots[newest]
        step.token_rows = torch.from_numpy(rows)
        step.sample_slots = torch.tensor([table.assign(s) for s in batch.sampling_seqs], dtype=torch.int64)
    if sampling is not None and sampling.prompt_rows:
        extra = torch.tensor([row for row, _, _ in sampling.prompt_rows], dtype=torch.int64)
        step.logits_indices = torch.cat([step.logits_indices, extra])
    return step


def table_input_ids(input_ids, token_rows, table):
    """Each row's input id: the staged one, or where `token_rows` >= 0 the token the table holds (graph-safe)."""
    return torch.where(token_rows >= 0, table[token_rows.clamp(min=0)], input_ids)

# %% cell: runner
class ModelRunner:
    """The Executor of one device: owns the model, its KV cache, the token table and the sampler."""

    def __init__(self, config, model_config, device=None, layers=None, token_table: bool = True):
        if not config.is_resolved:
            raise ValueError("ModelRunner needs a resolved EngineConfig (call config.resolve(model_config))")
        self.config = config
        self.model_config = model_config  # parsed once by the engine, never reloaded here
        self.device = torch.device(device) if device is not None else config.device
        self.dtype = config.dtype
        self.block_size = config.block_size
        self.backend = config.attention_backend_class()
        with torch.device(self.device):
            self.model = Qwen3ForCausalLM(model_config, layers).to(self.dtype)
        load_weights(self.model, config.model_path())
        self.model.eval()
        self.tp_size = layers.tp_size if layers is not None else 1
        # the RNG of rows without a seed of their own
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.sampler = Sampler(self.generator)
        # two slots per sequence the scheduler may run: finished ones are reclaimed only when the free list is empty
        self.table = TokenTable(2 * config.max_num_seqs, self.device) if token_table else None
        self.kv_cache = None  # one tensor [2, layers, blocks, block_size, kv_heads, head_dim]
        self.kv_caches = []  # per layer (k_cache, v_cache) views of it
        self.num_kv_blocks = 0
        self.num_eager_steps = 0  # forward passes run op by op

    # ---- the Executor protocol ----------------------------------------------------------
    def execute(self, batch, sampling: SamplingBatch) -> SamplerOutput:
        """One step: inputs, forward, sampling."""
        return self.run(self.prepare(batch, sampling), sampling)

    def prepare(self, batch, sampling: SamplingBatch | None = None) -> StepInputs:
        """The step's CPU inputs for a ScheduledBatch (`prepare_step_inputs`)."""
        return prepare_step_inputs(batch, sampling, self.block_size, self.table)

    @torch.inference_mode()
    def run(self, step: StepInputs, sampling: SamplingBatch) -> SamplerOutput:
        """Forward and sample a prepared step, op by op."""
        logits, slots = self._forward(step)
        return self.sample(logits, sampling, slots)

    @torch.inference_mode()
    def forward(self, step: StepInputs) -> torch.Tensor:
        """Run the model on a step; logits [len(logits_indices), V] of the rows it asks for."""
        return self._forward(step)[0]

    def _forward(self, step: StepInputs) -> tuple:
        if not self.kv_caches:
            raise RuntimeError("init_kv_cache() must run before the first step")
        tensors = [step.input_ids, step.positions, step.slot_mapping, step.logits_indices, step.cu_seqlens_q,
                   step.cu_seqlens_k, step.context_lens, step.block_tables]
        if step.token_rows is not None:
            tensors += [step.token_rows, step.sample_slots]
        ids, positions, slot_mapping, rows, cu_q, cu_k, context_lens, tables, *table_args = pack_to_device(
            tensors, self.device)
        if table_args:
            ids = table_input_ids(ids, table_args[0], self.table.tokens)
        batch = AttentionBatch(slot_mapping, cu_q, cu_k, step.max_seqlen_q, step.max_seqlen_k, context_lens, tables,
                               self.kv_caches, self.backend, step.is_decode)
        self.num_eager_steps += 1
        hidden = self.model(ids, positions, batch)
        return self.model.compute_logits(hidden[rows]), (table_args[1] if table_args else None)

    def sample(self, logits: torch.Tensor, sampling: SamplingBatch, slots: torch.Tensor | None = None) -> SamplerOutput:
        """Tokens (and logprobs) for the sampling rows of `logits`; each token also goes to its table slot."""
        out = sample_batch(self.sampler, logits, sampling)
        if slots is not None and self.table is not None:
            self.table.tokens.index_copy_(0, slots, out.tokens)
        return out

    # ---- the KV cache --------------------------------------------------------------
    @property
    def kv_block_bytes(self) -> int:
        """Bytes one block occupies across all layers on this rank."""
        return kv_block_bytes(self.model_config, self.block_size, self.dtype, self.tp_size)

    def profile_num_kv_blocks(self) -> int:
        """How many KV blocks fit: a memory budget on CPU, a profiled share of the GPU on CUDA."""
        if self.device.type != "cuda":
            return self.config.cpu_kv_blocks(self.kv_block_bytes)
        return profile_gpu_kv_blocks(self)

    def init_kv_cache(self, num_blocks: int) -> None:
        """Allocate the paged KV cache: `num_blocks` blocks for every layer."""
        mc = self.model_config
        self.kv_cache, self.kv_caches = allocate_kv_cache(
            mc.num_hidden_layers, num_blocks, self.block_size, mc.num_key_value_heads // self.tp_size,
            head_dim_of(mc), self.dtype, self.device)
        self.num_kv_blocks = num_blocks
        _logger.info("KV cache: %d blocks of %d tokens (%.1f MiB) on %s", num_blocks, self.block_size,
                     num_blocks * self.kv_block_bytes / 2**20, self.device)

    def shutdown(self) -> None:
        """Release the cache."""
        self.kv_cache, self.kv_caches = None, []

# %% cell: profile
def profile_gpu_kv_blocks(runner) -> int:
    """KV blocks that fit on the runner's GPU beside its weights and its peak activations."""
    torch.cuda.synchronize(runner.device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(runner.device)
    torch.cuda.reset_peak_memory_stats(runner.device)
    dummy_step(runner)
    torch.cuda.synchronize(runner.device)
    activations = torch.cuda.max_memory_allocated(runner.device) - before
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(runner.device)
    others = total - free - torch.cuda.memory_reserved(runner.device)  # CUDA context, other processes
    weights = sum(t.numel() * t.element_size() for t in (*runner.model.parameters(), *runner.model.buffers()))
    peak = weights + activations
    budget = gpu_kv_cache_bytes(total, free, others, weights, activations, runner.config.gpu_memory_utilization)
    blocks = int(budget // runner.kv_block_bytes)
    _logger.info("memory profile: peak %.2f GiB (weights + activations of %d tokens), other %.2f GiB, "
                 "total %.2f GiB x %.2f -> %d KV blocks", peak / 2**30, runner.config.max_num_batched_tokens,
                 others / 2**30, total / 2**30, runner.config.gpu_memory_utilization, blocks)
    if blocks < 1:
        raise ValueError(
            f"no GPU memory left for the KV cache: weights and activations peak at {peak / 2**30:.2f} GiB, "
            f"other use {others / 2**30:.2f} GiB, of {total / 2**30:.2f} GiB at gpu_memory_utilization="
            f"{runner.config.gpu_memory_utilization}; raise it or lower max_num_batched_tokens")
    return blocks


@torch.inference_mode()
def dummy_step(runner) -> None:
    """A forward of max_num_batched_tokens dummy tokens plus sampling, on a scratch one-block cache."""
    total = runner.config.max_num_batched_tokens
    seq_len = min(runner.config.max_model_len, total)
    num_seqs = max(1, min(runner.config.max_num_seqs, total // seq_len))
    lens = [seq_len] * num_seqs
    _, caches = allocate_kv_cache(runner.model_config.num_hidden_layers, 1, runner.block_size,
                                  runner.model_config.num_key_value_heads // runner.tp_size,
                                  head_dim_of(runner.model_config), runner.dtype, runner.device)
    step = build_step_inputs([[0] * n for n in lens], [0] * num_seqs,
                             [[0] * math.ceil(n / runner.block_size) for n in lens], [True] * num_seqs,
                             runner.block_size)
    step.slot_mapping.fill_(-1)  # read block 0 everywhere, write nowhere
    rows = min(runner.config.max_num_seqs, step.num_tokens)
    step.logits_indices = torch.arange(rows)
    saved, runner.kv_caches = runner.kv_caches, caches
    try:
        logits = runner.forward(step)
        runner.num_eager_steps -= 1  # a measurement, not a step
        if logits is not None:
            runner.sampler(logits, [SamplingParams(top_p=0.9)] * rows)
    finally:
        runner.kv_caches = saved
