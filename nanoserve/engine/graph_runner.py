"""CUDA graphs for every step: one runner that stages a step into static buffers and replays its bucket (chapter 08)."""
import logging

import numpy as np
import torch

from .model_runner import table_input_ids
from ..sampler import SamplerOutput

_logger = logging.getLogger(__name__)
_NP_TO_TORCH = {np.int64: torch.int64, np.int32: torch.int32, np.float32: torch.float32}


def graph_buckets(limit: int, fine: bool = True) -> list:
    """Sizes to capture, ending exactly at `limit`: 1, 2, 4, 8, then multiples of 16 (fine) or doublings up to 512,
    then x1.5 and x4/3 in turn."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive int, got {limit!r}")
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        if size < 16 or (not fine and size < 512):
            size *= 2
        elif size < 512:
            size += 16
        else:
            size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
    return grid + [limit]

# %% cell: staging
class StaticInputs:
    """Named device tensors that captured graphs read, all sections of ONE buffer, filled by ONE copy per step."""

    def __init__(self, fields: list, device):
        self.layout, offset = [], 0
        for name, dtype, shape, pad in fields:  # 8-byte aligned sections, so every dtype can view its own
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            self.layout.append((name, offset, size, dtype, shape, pad))
            offset += -(-size // 8) * 8
        self.buffer = torch.zeros(max(offset, 8), dtype=torch.uint8, device=device)
        self.views = {name: self.buffer[o:o + n].view(_NP_TO_TORCH[dt]).view(shape)
                      for name, o, n, dt, shape, _ in self.layout}
        self.host()
        self.send()  # every field at its padding value

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.views[name]

    def host(self) -> dict:
        """Numpy views of a fresh pinned host copy, every field at its padding value: fill them, then `send`."""
        # fresh each step: torch's caching host allocator hands a pinned block back only after its copy ran
        self._host = torch.empty(self.buffer.numel(), dtype=torch.uint8, pin_memory=self.buffer.is_cuda)
        raw = self._host.numpy()
        views = {name: raw[o:o + n].view(dt).reshape(shape) for name, o, n, dt, shape, _ in self.layout}
        for name, *_, pad in self.layout:
            views[name][...] = pad
        return views

    def send(self) -> None:
        """Copy the host views filled since `host()` to the device, without waiting."""
        self.buffer.copy_(self._host, non_blocking=True)


def capture_graph(fn, pool, generator=None) -> "torch.cuda.CUDAGraph":
    """A CUDA graph of `fn()` (which writes into static tensors), after one warm-up run outside the capture."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    if generator is not None:
        graph.register_generator_state(generator)  # each replay advances this generator
    with torch.cuda.graph(graph, pool=pool):
        fn()
    return graph


def graph_sample(logits, temperature, greedy, generator):
    """Per-row temperature sampling by the exponential race of chapter 06 (greedy rows: the argmax); capturable."""
    logits = logits.float()
    probs = (logits / temperature.unsqueeze(1)).softmax(dim=-1)
    noise = torch.empty_like(probs).exponential_(generator=generator).clamp_(min=1e-20)
    return torch.where(greedy != 0, logits.argmax(dim=-1), probs.div_(noise).argmax(dim=-1))

# %% cell: runner
class GraphRunner:
    """The Executor of a ModelRunner whose steps replay CUDA graphs: one per (attention variant, token bucket),
    then small head graphs (LM head + sampling) per row count. Off CUDA the same functions run uncaptured."""

    def __init__(self, runner, variants: list, sample: bool = True):
        self.runner, self.model, self.variants = runner, runner.model, list(variants)
        self.sample_in_graph = sample  # False on tensor-parallel ranks: the LM head gathers to rank 0 only
        self.graphs, self.head_graphs, self.batches = {}, {}, {}
        self.replays = {v.name: 0 for v in self.variants}  # steps each variant replayed
        self.common = self.own = self.hidden = self.tokens = None

    # ---- the Executor protocol, delegated to the runner where graphs change nothing -------------
    @property
    def num_eager_steps(self) -> int:
        return self.runner.num_eager_steps

    def profile_num_kv_blocks(self) -> int:
        return self.runner.profile_num_kv_blocks()

    def init_kv_cache(self, num_blocks: int) -> None:
        """The runner's cache, then every graph over it."""
        self.runner.init_kv_cache(num_blocks)
        self._allocate()
        with torch.inference_mode():
            self._capture()

    def shutdown(self) -> None:
        """Drop the graphs (they hold the pool and point into the cache) before the cache."""
        self.graphs, self.head_graphs, self.batches = {}, {}, {}
        self.runner.shutdown()

    def execute(self, batch, sampling):
        """One step: prepare, then `run`."""
        return self.run(self.runner.prepare(batch, sampling), sampling)

    def prepare(self, batch, sampling=None):
        """The runner's step inputs (a tensor-parallel rank 0 prepares here and ships them)."""
        return self.runner.prepare(batch, sampling)

    def sample(self, logits, sampling):
        """The runner's eager sampler (tensor-parallel rank 0, on the gathered logits)."""
        return self.runner.sample(logits, sampling)

    @torch.inference_mode()
    def run(self, step, sampling):
        """Forward and sample a prepared step: from graphs when one holds it (head graphs when every row is
        plain greedy/temperature), else eagerly."""
        rows = self._replay(step, sampling.temperatures)
        if rows is None:
            return self.runner.run(step, sampling)
        s = sampling.num_rows
        slots = self.common["sample_slots"][:s] if self.runner.table is not None else None
        if self.sample_in_graph and sampling.temperatures is not None and len(step.logits_indices) == s:
            self.head_graphs[rows, all(t == 0 for t in sampling.temperatures)]()
            return SamplerOutput(self.tokens[:s])  # a view the next replay overwrites
        logits = self.model.compute_logits(self.hidden[:len(step.logits_indices)])
        return self.runner.sample(logits, sampling, slots)

    @torch.inference_mode()
    def forward(self, step):
        """Logits of the rows `step` asks for (a tensor-parallel rank: None except on rank 0)."""
        rows = self._replay(step, None)
        if rows is None:
            return self.runner.forward(step)
        return self.model.compute_logits(self.hidden[:len(step.logits_indices)])

    # ---- capture ---------------------------------------------------------------------------
    def _allocate(self) -> None:
        """The static inputs every graph reads: the common fields, then each variant's own."""
        runner, tokens = self.runner, max(max(v.buckets) for v in self.variants)
        rows = max(v.logits_rows(max(v.buckets)) for v in self.variants)
        scratch = runner.table.capacity if runner.table is not None else 0  # padding rows sample into it
        self.common = StaticInputs([
            ("input_ids", np.int64, (tokens,), 0), ("positions", np.int64, (tokens,), 0),
            ("slot_mapping", np.int64, (tokens,), -1), ("token_rows", np.int64, (tokens,), -1),
            ("logits_indices", np.int64, (rows,), 0), ("sample_slots", np.int64, (rows,), scratch),
            ("temperature", np.float32, (rows,), 1.0), ("greedy", np.int32, (rows,), 1)], runner.device)
        self.own = {v.name: StaticInputs(v.fields(), runner.device) for v in self.variants}
        self.hidden = torch.zeros(rows, runner.model_config.hidden_size, dtype=runner.dtype, device=runner.device)
        self.tokens = torch.zeros(rows, dtype=torch.int64, device=runner.device)

    def _capture(self) -> None:
        """Every forward graph, largest bucket first, then the head graphs; one memory pool for all."""
        on_cuda = self.runner.device.type == "cuda"
        if on_cuda and not getattr(self.runner.backend, "supports_cuda_graphs", False):
            raise ValueError(f"the {self.runner.backend.name!r} attention backend cannot be captured in a CUDA "
                             "graph (it synchronises with the host); use the flash backend or enforce_eager=True")
        pool = torch.cuda.graph_pool_handle() if on_cuda else None
        generator = self.runner.generator
        if on_cuda and not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
            generator = None  # an older torch: only its default CUDA generator is graph-safe
        head_rows = set()
        for v in self.variants:
            for bucket in reversed(v.buckets):
                batch = self.batches[v.name, bucket] = v.batch(self.common, self.own[v.name], bucket,
                                                               self.runner.kv_caches)
                fn = self._forward_fn(batch, bucket, v.logits_rows(bucket))
                self.graphs[v.name, bucket] = capture_graph(fn, pool).replay if on_cuda else fn
                head_rows.add(v.logits_rows(bucket))
        if self.sample_in_graph:
            for rows in sorted(head_rows, reverse=True):
                for greedy in (True, False):
                    fn = self._head_fn(rows, greedy, generator)
                    self.head_graphs[rows, greedy] = capture_graph(fn, pool, generator).replay if on_cuda else fn
        if on_cuda:
            torch.cuda.synchronize()

    def _forward_fn(self, batch, bucket: int, rows: int):
        """What a forward graph holds: input ids (from the token table where asked), the model, the rows to sample."""
        c, table = self.common, self.runner.table

        def forward():
            ids = c["input_ids"][:bucket]
            if table is not None:
                ids = table_input_ids(ids, c["token_rows"][:bucket], table.tokens)
            hidden = self.model(ids, c["positions"][:bucket], batch)
            torch.index_select(hidden, 0, c["logits_indices"][:rows], out=self.hidden[:rows])
        return forward

    def _head_fn(self, rows: int, greedy: bool, generator):
        """What a head graph holds: the LM head, argmax or temperature sampling, the tokens into the table."""
        c, table = self.common, self.runner.table

        def head():
            logits = self.model.compute_logits(self.hidden[:rows])
            picked = logits.argmax(-1) if greedy else graph_sample(logits, c["temperature"][:rows], c["greedy"][:rows],
                                                                   generator)
            self.tokens[:rows].copy_(picked)
            if table is not None:
                table.tokens.index_copy_(0, c["sample_slots"][:rows], self.tokens[:rows])
        return head

    # ---- replay ----------------------------------------------------------------------------
    def plan(self, step):
        """(variant, its plan) of the first variant with a graph that holds `step`, or None."""
        for v in self.variants:
            plan = v.plan(step)
            if plan is not None and len(step.logits_indices) <= v.logits_rows(plan.bucket) \
                    and (v.name, plan.bucket) in self.graphs:
                return v, plan
        return None

    def _replay(self, step, temperatures) -> int | None:
        """Stage `step` and replay its forward graph; the rows of `hidden` it filled, or None (no graph holds it)."""
        chosen = self.plan(step)
        if chosen is None:
            return None
        v, plan = chosen
        self._stage_common(step, plan.order, temperatures)
        own = self.own[v.name]
        views = own.host()
        v.stage(views, step, plan)
        own.send()
        self.graphs[v.name, plan.bucket]()
        self.replays[v.name] += 1
        return v.logits_rows(plan.bucket)

    def _stage_common(self, step, order, temperatures) -> None:
        """The common fields of `step` in the variant's row order (None: the step's own), padding after."""
        x, t = self.common.host(), step.num_tokens
        fields = [("input_ids", step.input_ids), ("positions", step.positions), ("slot_mapping", step.slot_mapping)]
        if step.token_rows is not None:
            fields.append(("token_rows", step.token_rows))
        for name, value in fields:
            x[name][:t] = value.numpy() if order is None else value.numpy()[order]
        indices = step.logits_indices.numpy()
        if order is not None:  # where each of the step's rows went
            where = np.empty(t, np.int64)
            where[order] = np.arange(t)
            indices = where[indices]
        x["logits_indices"][:len(indices)] = indices
        if step.sample_slots is not None:
            x["sample_slots"][:len(step.sample_slots)] = step.sample_slots.numpy()
        if temperatures is not None:
            temps = np.asarray(temperatures, np.float32)
            x["temperature"][:len(temps)] = np.where(temps == 0, 1.0, temps)  # greedy rows: a flag and a harmless 1.0
            x["greedy"][:len(temps)] = temps == 0
        self.common.send()
