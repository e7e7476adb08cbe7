# %%
#| default_exp parallel.layers

# %%
#| export parallel.group
"""TPGroup: the explicit handle a tensor-parallel rank holds on its peers."""
from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TPGroup:
    """A rank's place in a tensor-parallel group: its rank, the group size, and the process group."""

    rank: int = 0
    size: int = 1
    process_group: object = None  # a torch.distributed ProcessGroup (gloo or nccl); None when size == 1

    def __post_init__(self):
        if not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"tensor-parallel size must be a positive int, got {self.size!r}")
        if not isinstance(self.rank, int) or not 0 <= self.rank < self.size:
            raise ValueError(f"rank must be in [0, {self.size}), got {self.rank!r}")
        if self.size > 1 and self.process_group is None:
            raise ValueError("a tensor-parallel group of size > 1 needs a process group")

    @property
    def is_first(self) -> bool:
        """True on rank 0, the rank that sees logits and samples."""
        return self.rank == 0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum `x` over every rank, in place; a no-op at size 1."""
        if self.size > 1:
            self.process_group.allreduce([x]).wait()
        return x

    def gather_to_first(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor | None:
        """Concatenate every rank's `x` along `dim` on rank 0; the other ranks get None."""
        if self.size == 1:
            return x
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.size)] if self.is_first else []
        opts = torch.distributed.GatherOptions()
        opts.rootRank = 0
        self.process_group.gather([parts] if self.is_first else [], [x], opts).wait()
        return torch.cat(parts, dim=dim) if self.is_first else None

    def broadcast_(self, x: torch.Tensor) -> torch.Tensor:
        """Overwrite `x` on every rank with rank 0's `x`."""
        if self.size > 1:
            opts = torch.distributed.BroadcastOptions()
            opts.rootRank = 0
            self.process_group.broadcast([x], opts).wait()
        return x

    def barrier(self) -> None:
        """Wait until every rank gets here."""
        if self.size > 1:
            self.all_reduce(torch.zeros(1, device=_group_device(self)))


def _group_device(group: TPGroup) -> torch.device:
    """The device a group's collectives run on (cuda:rank under nccl)."""
    name = group.process_group.name() if group.process_group is not None else "gloo"
    return torch.device("cuda", torch.cuda.current_device()) if name == "nccl" else torch.device("cpu")


def connect_group(rank: int, size: int, port: int, backend: str = "gloo", host: str = "127.0.0.1",
                  prefix: str = "tp", timeout_s: float = 120.0, store=None) -> TPGroup:
    """Join (rank > 0) or host (rank 0 passes its `store`) the rendezvous at host:port and build a TPGroup.

    No default process group is created: two engines in one process each get their own group.
    """
    import torch.distributed as dist

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if size == 1:
        return TPGroup()
    timeout = datetime.timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
    store = dist.PrefixStore(prefix, store)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        pg = dist.ProcessGroupNCCL(store, rank, size)
    else:
        pg = dist.ProcessGroupGloo(store, rank, size, timeout)
    return TPGroup(rank, size, pg)


def host_store(size: int, host: str = "127.0.0.1", timeout_s: float = 120.0):
    """Rank 0's rendezvous store on a free port the OS picks (read it back from `.port`)."""
    import torch.distributed as dist

    return dist.TCPStore(host, 0, size, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=timeout_s))

# %%
#| export parallel.transport
"""Two ways to ship a step's inputs from rank 0 to the workers: shared memory, or a broadcast."""
from __future__ import annotations

import io
import pickle
import struct
from multiprocessing import shared_memory

import torch

_LEN = struct.Struct("<Q")  # 8-byte message length at the start of the buffer


class _StepPickler(pickle.Pickler):
    """Pickles CPU tensors as numpy arrays: 20x cheaper than torch's own tensor pickling."""

    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor) and obj.device.type == "cpu" and obj.dtype != torch.bfloat16:
            return torch.from_numpy, (obj.detach().numpy(),)
        return NotImplemented


def dumps(message) -> bytes:
    """Serialize a step message (plain Python objects and CPU tensors)."""
    buf = io.BytesIO()
    _StepPickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    return buf.getvalue()


class ShmSender:
    """Rank 0's side: pickle a message into one shared-memory buffer, then set every worker's event."""

    def __init__(self, events: list, capacity: int = 64 << 20):
        if capacity <= _LEN.size:
            raise ValueError(f"shared-memory capacity must exceed {_LEN.size} bytes, got {capacity}")
        self.shm = shared_memory.SharedMemory(create=True, size=capacity)  # a fresh, unique name per engine
        self.events = events

    @property
    def name(self) -> str:
        """The segment's name, which the workers attach to."""
        return self.shm.name

    def send(self, message) -> None:
        """Publish `message`; workers must have read the previous one (a collective in between ensures it)."""
        data = dumps(message)
        if _LEN.size + len(data) > self.shm.size:
            raise ValueError(f"step message of {len(data)} bytes exceeds the shared-memory buffer "
                             f"({self.shm.size} bytes); raise shm_bytes")
        self.shm.buf[_LEN.size:_LEN.size + len(data)] = data
        _LEN.pack_into(self.shm.buf, 0, len(data))
        for ev in self.events:
            ev.set()

    def close(self) -> None:
        """Release and remove the segment."""
        try:
            self.shm.close()
            self.shm.unlink()
        except FileNotFoundError:
            pass


class ShmReceiver:
    """A worker's side: wait for its event, then unpickle the message from the shared buffer."""

    def __init__(self, name: str, event):
        self.shm = shared_memory.SharedMemory(name=name)  # spawned workers share rank 0's resource tracker
        self.event = event

    def recv(self, timeout: float | None = None):
        """The next message, or None when `timeout` seconds pass without one."""
        if not self.event.wait(timeout):
            return None
        self.event.clear()  # before reading: rank 0 only writes again after a collective we join later
        (n,) = _LEN.unpack_from(self.shm.buf, 0)
        return pickle.loads(self.shm.buf[_LEN.size:_LEN.size + n])

    def close(self) -> None:
        """Detach from the segment."""
        self.shm.close()


def broadcast_object(group, message=None):
    """Send `message` from rank 0 to every rank over the group's (CPU) process group; returns it on every rank."""
    if group.size == 1:
        return message
    if group.is_first:
        data = torch.frombuffer(bytearray(dumps(message)), dtype=torch.uint8)
        length = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    group.broadcast_(length)
    if not group.is_first:
        data = torch.empty(int(length), dtype=torch.uint8)
    group.broadcast_(data)
    return message if group.is_first else pickle.loads(data.numpy().tobytes())

# %%
#| export parallel.workers
"""RankPool: rank 0 in the caller plus N-1 spawned worker processes that run whatever rank 0 runs."""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import time
import traceback
import weakref
from dataclasses import dataclass, field

from nanoserve.parallel.group import TPGroup, connect_group, host_store
from nanoserve.parallel.transport import ShmReceiver, ShmSender

_STOP = "stop"
_POLL_S = 0.2


@dataclass
class RankContext:
    """What a function called on every rank receives: the group and a per-rank scratch dict."""

    group: TPGroup
    state: dict = field(default_factory=dict)


def check_tp_size(size, backend: str = "gloo") -> None:
    """Reject a tensor-parallel size that is not a positive int, or that asks for more GPUs than exist."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"tensor_parallel_size must be an int, got {type(size).__name__}")
    if size < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {size}")
    if backend == "nccl":
        import torch

        n = torch.cuda.device_count()
        if size > n:
            raise ValueError(f"tensor_parallel_size={size} needs {size} CUDA devices, but {n} are visible")


def _worker_main(rank, size, port, backend, prefix, shm_name, event, replies, timeout_s):
    """A worker's whole life: join the group, then run each function rank 0 sends until told to stop."""
    try:
        receiver = ShmReceiver(shm_name, event)
        replies.put((rank, "hello", None))
        ctx = RankContext(connect_group(rank, size, port, backend, prefix=prefix, timeout_s=timeout_s))
        parent = mp.parent_process()
        while True:
            message = receiver.recv(timeout=_POLL_S)
            if message is None:
                if parent is not None and not parent.is_alive():
                    break  # the caller is gone: nobody will ever send us work or a stop
                continue
            if message == _STOP:
                break
            fn, args, ack = message
            fn(ctx, *args)
            if ack:
                replies.put((rank, "done", None))
        receiver.close()
    except BaseException:
        replies.put((rank, "error", traceback.format_exc()))
        replies.close()
        replies.join_thread()
        os._exit(1)  # skip interpreter teardown: a half-broken process group may abort in its destructor


@dataclass
class _Resources:
    """Everything a pool must release; kept apart from the pool so a finalizer can hold it."""

    procs: list
    sender: ShmSender
    replies: object
    ctx: RankContext | None = None
    failed: bool = False


def _release(res: _Resources, join_s: float = 5.0) -> None:
    """Stop the workers (politely, then by force), drop the process group, free the shared memory."""
    if any(p.is_alive() for p in res.procs):
        try:
            res.sender.send(_STOP)
        except Exception:
            pass
    deadline = time.monotonic() + join_s
    for p in res.procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in res.procs:
        if p.is_alive():
            p.terminate()
            p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join()
    if res.ctx is not None:
        pg = res.ctx.group.process_group
        if res.failed and pg is not None:
            try:
                pg.abort()  # a group whose peer died must not be torn down politely
            except Exception:
                pass
        res.ctx = None
    res.sender.close()
    res.replies.close()
    res.replies.cancel_join_thread()


class RankPool:
    """`size` ranks joined in one TPGroup: rank 0 is this process, ranks 1.. are spawned workers."""

    def __init__(self, size: int, backend: str = "gloo", timeout_s: float = 120.0, shm_bytes: int = 64 << 20):
        check_tp_size(size, backend)
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
        self.size, self.backend, self.timeout_s = size, backend, timeout_s
        spawn = mp.get_context("spawn")
        events = [spawn.Event() for _ in range(size - 1)]
        store = host_store(size, timeout_s=timeout_s)  # the OS picks a free port, so engines never collide
        self.port = store.port
        prefix = f"nanoserve-{os.getpid()}-{id(self)}"
        sender = ShmSender(events, shm_bytes)
        replies = spawn.Queue()
        procs = [spawn.Process(target=_worker_main, name=f"nanoserve-tp-rank{r}", daemon=True,
                               args=(r, size, self.port, backend, prefix, sender.name, events[r - 1], replies, timeout_s))
                 for r in range(1, size)]
        self._res = _Resources(procs, sender, replies)
        self._finalizer = weakref.finalize(self, _release, self._res)  # also runs at interpreter exit
        for p in procs:
            p.start()
        try:
            self._await("hello")
            self._res.ctx = RankContext(connect_group(0, size, self.port, backend, prefix=prefix,
                                                      timeout_s=timeout_s, store=store))
        except BaseException:
            self.close()
            raise

    @property
    def ctx(self) -> RankContext:
        """Rank 0's context (its group and scratch state)."""
        if self._res.ctx is None:
            raise RuntimeError("this RankPool is closed")
        return self._res.ctx

    @property
    def group(self) -> TPGroup:
        """Rank 0's TPGroup."""
        return self.ctx.group

    @property
    def worker_pids(self) -> list:
        """Process ids of the spawned workers."""
        return [p.pid for p in self._res.procs]

    def call(self, fn, *args, ack: bool = False):
        """Run `fn(ctx, *args)` on every rank (fn must be importable); return rank 0's result.

        With `ack`, wait until every worker has finished too (for set-up steps without collectives).
        """
        ctx = self.ctx
        self._check_alive()
        self._res.sender.send((fn, args, ack))
        try:
            result = fn(ctx, *args)
        except Exception as exc:
            self._raise_worker_failure(exc, wait_s=5.0)
            raise
        if ack:
            self._await("done")
        return result

    def close(self) -> None:
        """Stop the workers and free everything; safe to call twice."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- failure handling -------------------------------------------------------------------
    def _check_alive(self) -> None:
        for rank, p in enumerate(self._res.procs, start=1):
            if not p.is_alive():
                self._raise_worker_failure(None, wait_s=0.0)

    def _raise_worker_failure(self, cause, wait_s: float) -> None:
        """If a worker failed, close the pool and raise a RuntimeError saying which and why."""
        deadline = time.monotonic() + wait_s
        while True:
            report = self._worker_report()
            if report or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if report:
            self._res.failed = True
            self.close()
            raise RuntimeError(f"tensor-parallel {report}") from cause

    def _worker_report(self) -> str | None:
        try:
            while True:
                rank, kind, payload = self._res.replies.get_nowait()
                if kind == "error":
                    return f"worker rank {rank} failed:\n{payload}"
        except (queue.Empty, OSError, ValueError):
            pass
        dead = [(r, p.exitcode) for r, p in enumerate(self._res.procs, start=1) if not p.is_alive()]
        if dead:
            return "; ".join(f"worker rank {r} exited with code {code}" for r, code in dead)
        return None

    def _await(self, kind: str) -> None:
        """Wait for one `kind` reply per worker, failing fast if a worker dies or errs."""
        waiting = set(range(1, self.size))
        deadline = time.monotonic() + self.timeout_s
        while waiting:
            try:
                rank, got, payload = self._res.replies.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(self._res.procs, start=1) if not p.is_alive()]
                if dead:
                    self._raise_worker_failure(None, wait_s=1.0)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"tensor-parallel workers {sorted(waiting)} sent no {kind!r} within {self.timeout_s}s")
                continue
            if got == "error":
                self._res.failed = True
                self.close()
                raise RuntimeError(f"tensor-parallel worker rank {rank} failed:\n{payload}")
            if got == kind:
                waiting.discard(rank)

# %%
#| export
"""Tensor-parallel layers: chapter 01's split layers plus the communication that makes the pieces whole."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from nanoserve.model.layers import DenseLayers, LMHead, RowLinear, VocabEmbedding
from nanoserve.parallel.group import TPGroup


class RowParallelLinear(RowLinear):
    """Row-split linear whose partial products are summed over the group (bias added once, after the sum)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, group: TPGroup = TPGroup()):
        super().__init__(in_features, out_features, bias, group.rank, group.size)
        self.group = group

    def reduce(self, out: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(out)


class VocabParallelEmbedding(VocabEmbedding):
    """Vocab-split embedding: each rank fills the rows of the ids it owns (zeros elsewhere), then all-reduce."""

    def __init__(self, vocab_size: int, hidden: int, group: TPGroup = TPGroup()):
        super().__init__(vocab_size, hidden, group.rank, group.size)
        self.group = group

    def reduce(self, out: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(out)


class ParallelLMHead(LMHead):
    """Vocab-split LM head: each rank scores its slice of the vocabulary; rank 0 gathers full rows, others get None."""

    def __init__(self, vocab_size: int, hidden: int, tied: VocabEmbedding | None = None, group: TPGroup = TPGroup()):
        super().__init__(vocab_size, hidden, tied, group.rank, group.size)
        self.group = group

    def gather(self, logits: torch.Tensor) -> torch.Tensor | None:
        return self.group.gather_to_first(logits, dim=-1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor | None:
        logits = self.gather(F.linear(hidden, self.weight))
        return None if logits is None else logits[..., : self.vocab_size]  # drop the last shard's padding


class ShardedLayers(DenseLayers):
    """The layer factory of one tensor-parallel rank; column splits need no talk, so only three methods change."""

    def __init__(self, group: TPGroup = TPGroup()):
        if not isinstance(group, TPGroup):
            raise TypeError(f"ShardedLayers needs a TPGroup, got {type(group).__name__}")
        super().__init__(group.rank, group.size)
        self.group = group

    def row(self, in_features: int, out_features: int, bias: bool = False) -> RowParallelLinear:
        return RowParallelLinear(in_features, out_features, bias, self.group)

    def embedding(self, vocab_size: int, hidden: int) -> VocabParallelEmbedding:
        return VocabParallelEmbedding(vocab_size, hidden, self.group)

    def lm_head(self, vocab_size: int, hidden: int, tied: VocabEmbedding | None = None) -> ParallelLMHead:
        return ParallelLMHead(vocab_size, hidden, tied, self.group)

# %%
#| export parallel.checks
"""Functions run on every rank of a RankPool by chapter 09 and tests/dist: layer parity and message timing."""
from __future__ import annotations

import time

import torch

from nanoserve.model.layers import DenseLayers
from nanoserve.parallel.layers import ShardedLayers
from nanoserve.parallel.transport import broadcast_object


def _dense_and_sharded(ctx, kind: str, dims: dict):
    """The same layer built by DenseLayers and by ShardedLayers (over ctx.group)."""
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
    for (name, p_dense), (_, p_sharded) in zip(dense.named_parameters(), sharded.named_parameters()):
        for shard_id in getattr(p_dense, "shard_ids", (None,)):
            if shard_id is None:
                full_rows = p_dense.shape[0]
            elif shard_id in ("q", "k", "v"):
                full_rows = dense.q_size if shard_id == "q" else dense.kv_size
            else:
                full_rows = dense.shard_sizes[shard_id]
            full = torch.randn((full_rows, *p_dense.shape[1:]), generator=gen)
            p_dense.weight_loader(p_dense, full, shard_id)
            p_sharded.weight_loader(p_sharded, full, shard_id)


def layer_parity(ctx, dims: dict, seed: int = 0) -> dict | None:
    """Max |dense − sharded| per layer kind on rank 0 (None on the others); column outputs are gathered first."""
    gen = torch.Generator().manual_seed(seed)
    group, errors = ctx.group, {}
    for kind in ("qkv", "merged", "row", "embedding", "lm_head"):
        dense, sharded = _dense_and_sharded(ctx, kind, dims)
        _load_both(dense, sharded, gen)
        if kind == "embedding":
            x = torch.randint(0, dims["vocab"], (dims["tokens"],), generator=gen)
        else:
            in_features = dims["inter"] if kind == "row" else dims["hidden"]
            x = torch.randn(dims["tokens"], in_features, generator=gen)
        if kind == "row":  # a row-parallel layer receives only its slice of the input features
            n = sharded.in_features
            want, got = dense(x), sharded(x[:, group.rank * n:(group.rank + 1) * n])
        elif kind in ("qkv", "merged"):  # column-parallel: gather the slices to compare whole outputs
            want, got = dense(x), _gather_columns(group, sharded, sharded(x))
        else:
            want, got = dense(x), sharded(x)
        if group.is_first:
            errors[kind] = (want - got).abs().max().item()
    return errors if group.is_first else None


def _gather_columns(group, layer, y: torch.Tensor):
    """Reassemble a column-parallel output in the dense layout (parts are interleaved per rank)."""
    parts = group.gather_to_first(y.unsqueeze(0), dim=0)
    if parts is None:
        return None
    sizes = [layer.q_size, layer.kv_size, layer.kv_size] if hasattr(layer, "q_size") else layer.shard_sizes
    per_part = [p.split(sizes, dim=-1) for p in parts]  # [rank][part]
    return torch.cat([torch.cat([per_part[r][i] for r in range(group.size)], dim=-1) for i in range(len(sizes))], dim=-1)


def _tiny_sync(ctx) -> None:
    """What every model step ends with anyway: one small collective."""
    ctx.group.all_reduce(torch.zeros(1))


def shm_step(ctx, payload) -> None:
    """A do-nothing step; RankPool already delivered `payload` through shared memory."""
    _tiny_sync(ctx)


def broadcast_steps(ctx, payload, n: int) -> float:
    """Seconds per step when `payload` travels by a gloo broadcast instead (rank 0's view)."""
    start = time.perf_counter()
    for _ in range(n):
        broadcast_object(ctx.group, payload if ctx.group.is_first else None)
        _tiny_sync(ctx)
    return (time.perf_counter() - start) / n


def time_shm_steps(pool, payload, n: int) -> float:
    """Seconds per step when `payload` travels through the pool's shared-memory channel."""
    start = time.perf_counter()
    for _ in range(n):
        pool.call(shm_step, payload)
    return (time.perf_counter() - start) / n


def crash(ctx, rank: int) -> None:
    """Make one rank die abruptly while the others enter a collective (for failure tests)."""
    import os

    if ctx.group.rank == rank:
        os._exit(7)
    _tiny_sync(ctx)


def raise_on(ctx, rank: int) -> None:
    """Make one rank raise while the others enter a collective (for failure tests)."""
    if ctx.group.rank == rank:
        raise ZeroDivisionError(f"boom on rank {rank}")
    _tiny_sync(ctx)



def sharded_logits(ctx, model_path, token_ids: list) -> torch.Tensor | None:
    """Logits of one sequence from a Qwen3 model whose every rank loads only its shard (rank 0 gets them)."""
    from nanoserve.model.loader import load_qwen3

    model = load_qwen3(model_path, dtype=torch.float32, layers=ShardedLayers(ctx.group))
    ids = torch.tensor(token_ids)
    with torch.inference_mode():
        return model.compute_logits(model(ids, torch.arange(len(ids))))
