"""DeepSpeed (ZeRO stage 0-3), launched with `deepspeed` or torchrun; on CPU set DS_ACCELERATOR=cpu."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from embedctl.config.layers import deep_merge
from embedctl.errors import EmbedctlError
from embedctl.train.distributed import barrier, collective_timeout
from embedctl.train.engines.base import DualEncoder, SingleEngine


def deepspeed_config(zero_stage: int, grad_clip: float | None, amp_dtype, extra: dict[str, Any]) -> dict[str, Any]:
    """The generated DeepSpeed config; ``engine.deepspeed`` entries are merged over it."""
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,   # batches are pre-built; DeepSpeed only needs a consistent value
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": zero_stage},
        "zero_allow_untested_optimizer": True,  # the client torch AdamW (same update as the other engines)
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if grad_clip:
        cfg["gradient_clipping"] = grad_clip
    return deep_merge(cfg, extra or {})


class DeepSpeedEngine(SingleEngine):
    """DeepSpeed averages gradients over data-parallel ranks: the loss is multiplied by the world size."""

    name = "deepspeed"

    def __init__(self, info, device, grad_clip, amp_dtype=None, backend=None, zero_stage: int = 1,
                 extra: dict | None = None, timeout_s: float = 1800.0):
        if amp_dtype == torch.float16:
            raise EmbedctlError("train.precision=fp16 is not supported with engine.name=deepspeed",
                                hint="use train.precision=bf16 (or fp32)")
        super().__init__(info, device, grad_clip, None)
        import deepspeed

        if device.type == "cuda":
            torch.cuda.set_device(device)
        # timeout: one collective (engine.timeout_s; deepspeed's own default is 10 minutes)
        deepspeed.init_distributed(dist_backend=backend or ("nccl" if device.type == "cuda" else "gloo"),
                                   timeout=collective_timeout(timeout_s))
        self.zero_stage = zero_stage
        self.ds_config = deepspeed_config(zero_stage, grad_clip, amp_dtype, extra or {})

    def setup(self, encoder, optimizer, scheduler) -> None:
        import deepspeed

        self.encoder, self.optimizer, self.scheduler = encoder, optimizer, scheduler
        self.module, self.ds_optimizer, _, _ = deepspeed.initialize(
            model=DualEncoder(encoder), optimizer=optimizer, lr_scheduler=scheduler, config=self.ds_config,
            dist_init_required=False)

    def backward(self, loss: torch.Tensor) -> None:
        self.module.backward(loss * self.grad_scale())

    @contextlib.contextmanager
    def sync(self, enabled: bool):
        """GradCache backpropagates chunk by chunk: only the last chunk is a gradient-accumulation boundary
        (DeepSpeed reduces gradients there; reduction is linear, so the sum over chunks is unchanged)."""
        self.module.set_gradient_accumulation_boundary(enabled)
        try:
            yield
        finally:
            self.module.set_gradient_accumulation_boundary(True)

    def grad_scale(self) -> float:
        return float(self.world_size)

    def step(self) -> None:
        self.module.step()  # clipping (gradient_clipping), optimizer, lr scheduler, zero_grad

    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def optimizer_state_is_per_rank(self) -> bool:
        return self.zero_stage > 0

    def optimizer_state(self) -> dict | None:
        """ZeRO 1-3: this rank's fp32 master partitions + its inner AdamW state (tensors and numbers only)."""
        if self.zero_stage == 0:
            return self.optimizer.state_dict() if self.info.is_main else None
        opt = self.ds_optimizer
        if self.zero_stage == 3:
            opt._set_fp32_optimizer_param_groups()
            try:
                base = opt.optimizer.state_dict()
            finally:
                opt._clear_fp32_optimizer_param_groups()
            return {"base": base, "fp32_partitions": [p.detach().clone() for p in opt.fp32_partitioned_groups_flat]}
        return {"base": opt.optimizer.state_dict(),
                "fp32_partitions": [p.detach().clone() for p in opt.single_partition_of_fp32_groups]}

    def load_optimizer_state(self, state: dict) -> None:
        if self.zero_stage == 0:
            self.optimizer.load_state_dict(state)
            return
        opt = self.ds_optimizer
        if self.zero_stage == 3:
            from deepspeed.checkpoint.constants import FP32_FLAT_GROUPS, LOSS_SCALER, OPTIMIZER_STATE_DICT

            opt._rigid_load_state_dict({LOSS_SCALER: opt.loss_scaler, "dynamic_loss_scale": opt.dynamic_loss_scale,
                                        "overflow": False, OPTIMIZER_STATE_DICT: state["base"],
                                        FP32_FLAT_GROUPS: state["fp32_partitions"]}, load_optimizer_states=True)
            return
        opt.optimizer.load_state_dict(state["base"])
        for dst, src in zip(opt.single_partition_of_fp32_groups, state["fp32_partitions"], strict=True):
            dst.data.copy_(src)
        # the model's weights were loaded from the checkpoint's safetensors: equal to these fp32 partitions

    def gathered_weights(self):
        if self.zero_stage == 3:
            import deepspeed

            return deepspeed.zero.GatheredParameters(list(self.encoder.parameters()), modifier_rank=None)
        return contextlib.nullcontext()

    def close(self) -> None:
        import deepspeed.comm as ds_comm

        # without this barrier a CPU rank can SIGABRT at exit ("terminate called without an active exception");
        # the store barrier first: no time limit while rank 0 may still be saving
        barrier("close")
        ds_comm.barrier()
        ds_comm.destroy_process_group()

