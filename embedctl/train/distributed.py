"""Rank bookkeeping, batch slicing and an all-gather that keeps the local slice's gradient.

Where a training process sits is :class:`embedctl.util.ranks.RankEnv` (``RankEnv.from_env()``: the torch
launchers' RANK, WORLD_SIZE, LOCAL_RANK), the same type the index and prebatch ranks use.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from embedctl.errors import EmbedctlError


def ensure_launcher_env() -> None:
    """Let ddp / deepspeed run as one process without a launcher: fill the env:// rendezvous variables."""
    if "MASTER_ADDR" in os.environ and "RANK" in os.environ:
        return
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)), ("RANK", "0"),
                       ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)


def slice_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """Contiguous near-equal slice [start, end) of n items for ``rank`` (the first n % world ranks get one more).

    Example: slice_bounds(5, 0, 2) == (0, 3); slice_bounds(5, 1, 2) == (3, 5).
    """
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def gather_with_grad(local: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``local`` along dim 0; only this rank's rows carry gradient.

    local [n_r, *rest] where n_r and (for 3-d tensors) dim 1 may differ between ranks: smaller tensors are
    zero-padded along dim 1 (ColBERT token axis; pad positions must be masked by the caller) and the result
    is [sum n_r, max rest...]. Single process: returns ``local`` unchanged.
    Example: rank 0 holds [2, 384], rank 1 [3, 384] -> both get [5, 384], rows 0-1 differentiable on rank 0.
    """
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return local
    world, rank = dist.get_world_size(), dist.get_rank()
    shape = torch.tensor(list(local.shape), dtype=torch.long, device=local.device)
    shapes = [torch.zeros_like(shape) for _ in range(world)]
    dist.all_gather(shapes, shape)
    shapes_l = [s.tolist() for s in shapes]
    target = [max(s[i] for s in shapes_l) for i in range(local.ndim)]
    padded = _pad_to(local.detach(), target)
    buffers = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(buffers, padded.contiguous())
    parts = [buf[: s[0]] for buf, s in zip(buffers, shapes_l, strict=True)]
    parts[rank] = _pad_to(local, [local.shape[0]] + target[1:])
    return torch.cat(parts, dim=0)


def _pad_to(x: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """Zero-pad every dim of x (except 0 unless asked) up to ``shape``."""
    pads: list[int] = []
    for have, want in zip(reversed(x.shape), reversed(shape), strict=True):
        pads += [0, want - have]
    return F.pad(x, pads) if any(pads) else x


_BARRIER_SEQ = itertools.count()
_POLL_MAX_S = 0.1


def barrier(label: str | None = None) -> None:
    """Wait until every rank gets here, for as long as it takes; raise if the ranks disagree on where "here" is.

    Used after every rank-0-only phase (evaluation, checkpoint and final saves, run info). A collective
    barrier would fail once that phase outlasts the process group's timeout (``engine.timeout_s``; gloo:
    "Connection closed by peer" on the rank that finishes last), so this one counts arrivals in the
    launcher's key-value store and polls it, with no time limit: a rank that dies is noticed by the
    launcher (torchrun / deepspeed stop the others). Each rank also records ``label`` (default: the
    caller's file:line), so ranks that reach different synchronisation points (one skipped a phase the
    others ran) fail at once with both places named instead of pairing the wrong barriers.
    """
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return
    if label is None:
        caller = sys._getframe(1).f_code
        label = f"{Path(caller.co_filename).name}:{sys._getframe(1).f_lineno}"
    store = _default_store()
    seq, rank, world = next(_BARRIER_SEQ), dist.get_rank(), dist.get_world_size()
    key = f"embedctl/barrier/{seq}"
    store.set(f"{key}/rank{rank}", label)
    store.add(key, 1)
    pause = 0.001
    while store.add(key, 0) < world:
        time.sleep(pause)
        pause = min(pause * 2, _POLL_MAX_S)
    labels = [store.get(f"{key}/rank{r}").decode() for r in range(world)]
    if len(set(labels)) > 1:
        where = ", ".join(f"rank {r} at {lab}" for r, lab in enumerate(labels))
        raise EmbedctlError(f"the training ranks reached different synchronisation points ({where})",
                            hint="a bug in embedctl: please report it with this message")


def _default_store():
    """The key-value store the process group was created with (torchrun's / env:// rendezvous store)."""
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def collective_timeout(seconds: float) -> timedelta:
    """``engine.timeout_s`` as the timedelta torch.distributed / deepspeed take."""
    return timedelta(seconds=seconds)
