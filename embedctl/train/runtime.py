"""Seeds, devices, autocast and RNG state capture (what exact resume and GradCache need)."""

from __future__ import annotations

import contextlib
import random
import warnings
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """`auto` -> cuda:<local_rank> when CUDA is present, else cpu; `cuda` -> cuda:<local_rank>."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        name = f"cuda:{local_rank}"
    return torch.device(name)


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype to use, or None for fp32; warns and falls back where unsupported."""
    if precision == "fp32":
        return None
    if device.type == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            warnings.warn("train.precision=bf16: this GPU has no bf16 support; training in fp32", stacklevel=2)
            return None
        return torch.bfloat16 if precision == "bf16" else torch.float16
    if precision == "fp16":
        warnings.warn("train.precision=fp16 needs a GPU; training in fp32 on CPU (bf16 works on CPU)", stacklevel=2)
        return None
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None):
    """torch.autocast for ``dtype`` on ``device``, or a no-op context for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def capture_rng() -> dict[str, Any]:
    """Python, numpy, torch CPU and CUDA RNG states (tensors and plain lists only: safe to torch.save)."""
    py = random.getstate()
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]),
                  int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng`."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    np_state = state["numpy"]
    np.random.set_state((np_state[0], np_state[1].numpy().astype(np.uint32), np_state[2], np_state[3], np_state[4]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_torch_rng(device: torch.device):
    """Torch RNG state for CPU and ``device`` (GradCache re-encodes a chunk with the same dropout masks)."""
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def restore_torch_rng(saved, device: torch.device) -> None:
    torch.set_rng_state(saved[0])
    if saved[1] is not None:
        torch.cuda.set_rng_state(saved[1], device)
