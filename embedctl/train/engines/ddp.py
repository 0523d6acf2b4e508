"""torch.distributed DistributedDataParallel (launch with torchrun)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from embedctl.train.distributed import barrier, collective_timeout
from embedctl.train.engines.base import DualEncoder, SingleEngine


def init_process_group(backend: str | None, device: torch.device, timeout_s: float) -> None:
    """Join the launcher's process group (env:// rendezvous) unless already joined; ``timeout_s`` bounds one
    collective (engine.timeout_s); rank-0-only phases wait in ``distributed.barrier``, which has no limit."""
    if dist.is_initialized():
        return
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend, timeout=collective_timeout(timeout_s))


class DDPEngine(SingleEngine):
    """Each rank back-propagates the global loss through its slice; DDP averages, so scale by world size."""

    name = "ddp"

    def __init__(self, info, device, grad_clip, amp_dtype=None, backend: str | None = None,
                 timeout_s: float = 1800.0):
        super().__init__(info, device, grad_clip, amp_dtype)
        init_process_group(backend, device, timeout_s)

    def setup(self, encoder, optimizer, scheduler) -> None:
        self.encoder, self.optimizer, self.scheduler = encoder, optimizer, scheduler
        ids = [self.device.index] if self.device.type == "cuda" else None
        # find_unused_parameters: backbones carry weights the embeddings never use (BERT's pooler)
        self.module = torch.nn.parallel.DistributedDataParallel(DualEncoder(encoder), device_ids=ids,
                                                                find_unused_parameters=True)

    @contextlib.contextmanager
    def sync(self, enabled: bool):
        if enabled:
            yield
        else:
            with self.module.no_sync():
                yield

    def grad_scale(self) -> float:
        return float(self.world_size)

    def close(self) -> None:
        if dist.is_initialized():
            barrier("close")  # no time limit: rank 0 may still be saving
            dist.barrier()
            dist.destroy_process_group()
