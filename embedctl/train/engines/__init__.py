"""Engines: single | ddp | deepspeed, one interface (see base.SingleEngine)."""

from __future__ import annotations

import torch

from embedctl.errors import ConfigError, EmbedctlError
from embedctl.train.distributed import ensure_launcher_env
from embedctl.train.engines.base import SingleEngine
from embedctl.train.engines.ddp import DDPEngine
from embedctl.train.engines.deepspeed import DeepSpeedEngine
from embedctl.util.ranks import RankEnv


def make_engine(cfg, info: RankEnv, device: torch.device, amp_dtype) -> SingleEngine:
    """Build the engine named by ``cfg.engine.name`` (joins the process group for ddp / deepspeed)."""
    name = cfg.engine.name
    if name == "single":
        if info.world > 1:
            raise EmbedctlError(f"engine.name=single but the launcher started {info.world} processes",
                                hint="set engine.name=ddp (torchrun) or deepspeed, or launch one process")
        return SingleEngine(info, device, cfg.train.grad_clip, amp_dtype)

    ensure_launcher_env()  # no launcher: a one-process group
    if cfg.engine.timeout_s <= 0:
        raise ConfigError([f"engine.timeout_s={cfg.engine.timeout_s}: must be positive (seconds)"])
    if name == "ddp":
        return DDPEngine(info, device, cfg.train.grad_clip, amp_dtype, cfg.engine.backend, cfg.engine.timeout_s)

    return DeepSpeedEngine(info, device, cfg.train.grad_clip, amp_dtype, cfg.engine.backend,
                           cfg.engine.zero_stage, cfg.engine.deepspeed, cfg.engine.timeout_s)
