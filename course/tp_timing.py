"""Teaching aid for appendix A3 and tests/dist: a broadcast transport and step timers, run on every rank of a pool.

They live in a module, not in the notebook, because a spawned worker must import what it runs; the engine uses
none of them (its steps travel through ShmSender/ShmReceiver in nanoserve/parallel/transport.py).
"""
import pickle
import time

import torch

from nanoserve.parallel.transport import dumps


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


def shm_step(ctx, payload) -> None:
    """A do-nothing step ending in one tiny all-reduce; RankPool already delivered `payload` through shared memory."""
    ctx.group.all_reduce(torch.zeros(1))


def broadcast_steps(ctx, payload, n: int) -> float:
    """Seconds per step when `payload` travels by a gloo broadcast instead (rank 0's view)."""
    start = time.perf_counter()
    for _ in range(n):
        broadcast_object(ctx.group, payload if ctx.group.is_first else None)
        ctx.group.all_reduce(torch.zeros(1))
    return (time.perf_counter() - start) / n


def time_shm_steps(pool, payload, n: int) -> float:
    """Seconds per step when `payload` travels through the pool's shared-memory channel."""
    start = time.perf_counter()
    for _ in range(n):
        pool.call(shm_step, payload)
    return (time.perf_counter() - start) / n
