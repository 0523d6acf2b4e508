"""AdamW with decoupled weight decay (none on biases and norms) and warmup + linear/cosine/constant decay."""

from __future__ import annotations

import math

import torch

from embedctl.config.sections.train import OptimConfig

_NO_DECAY_WORDS = ("bias", "norm", "layernorm", "ln_")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decayed weights, and biases / norm weights / 1-d params without decay.

    Example: for a BERT, `*.dense.weight` decays, `*.dense.bias` and `*.LayerNorm.weight` do not.
    """
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        lowered = name.lower()
        if param.ndim < 2 or any(word in lowered for word in _NO_DECAY_WORDS):
            no_decay.append(param)
        else:
            decay.append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    """torch AdamW over :func:`param_groups` with ``cfg.lr``, ``cfg.betas``, ``cfg.eps``; the fused kernel
    (``cfg.fused``) when every parameter lives on a device that has it (CPU or CUDA)."""
    groups = param_groups(model, cfg.weight_decay)
    devices = {p.device.type for g in groups for p in g["params"]}
    fused = bool(cfg.fused) and devices <= {"cpu", "cuda"}
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
                             **({"fused": True} if fused else {}))


class WarmupSchedule:
    """LR multiplier for a step count: linear warmup 0 -> 1 over ``warmup`` steps, then decay to 0 at ``total``.

    A plain object (not a lambda) so LambdaLR's state_dict holds its settings as JSON-able numbers.
    Example: WarmupSchedule(10, 100, "linear")(5) == 0.5; (55) == 0.5; (100) == 0.0.
    """

    def __init__(self, warmup: int, total: int, kind: str):
        self.warmup, self.total, self.kind = int(warmup), int(total), kind

    def __call__(self, step: int) -> float:
        if self.warmup > 0 and step < self.warmup:
            return step / self.warmup
        if self.kind == "constant":
            return 1.0
        span = max(1, self.total - self.warmup)
        progress = min(1.0, max(0.0, (step - self.warmup) / span))
        if self.kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0 - progress


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, max_steps: int):
    """LambdaLR stepping once per optimizer step: the lr of (1-based) step s is lr x f(s - 1)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupSchedule(cfg.warmup_steps, max_steps, cfg.schedule))
