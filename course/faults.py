"""Fault injection for tensor-parallel pools: functions every rank runs, where one chosen rank misbehaves."""
import os
import time

import torch


def _tiny_sync(ctx) -> None:
    """What every model step ends with anyway: one small collective."""
    ctx.group.all_reduce(torch.zeros(1))


def crash(ctx, rank: int) -> None:
    """Make one rank die abruptly while the others enter a collective."""
    if ctx.group.rank == rank:
        os._exit(7)
    _tiny_sync(ctx)


def raise_on(ctx, rank: int) -> None:
    """Make one rank raise while the others enter a collective."""
    if ctx.group.rank == rank:
        raise ZeroDivisionError(f"boom on rank {rank}")
    _tiny_sync(ctx)


def stall_on(ctx, rank: int, seconds: float) -> None:
    """Make one rank sit still for `seconds` (a slow worker, or a stand-in for a hung collective)."""
    if ctx.group.rank == rank:
        time.sleep(seconds)
