"""Rank bookkeeping, batch slicing and an all-gather that keeps the local slice's gradient."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: from the launcher's env (torchrun / deepspeed set RANK, WORLD_SIZE, LOCAL_RANK)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> DistInfo:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                   int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


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


def all_reduce_sum(value: float, device: torch.device) -> float:
    """Sum a Python number over ranks (identity with one process)."""
    if not dist.is_available() or not dist.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
