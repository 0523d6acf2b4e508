"""bfloat16 in numpy (which has no such dtype): float32 values rounded to bfloat16 bits and back, as the C
kernels' to_bf16 / from_bf16 do (round to nearest, ties to even; finite inputs)."""

from __future__ import annotations

import numpy as np


def to_bf16(v: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even (finite inputs), as the kernels' to_bf16."""
    u = np.ascontiguousarray(v, np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def from_bf16(h: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32, exactly."""
    return (np.asarray(h, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def split_halves(v: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """float32 ``v`` as bfloat16 bits hi = bf16(v) and lo = bf16(v - hi) (v - hi - lo within 2^-16 |v|), lo None
    where every lo is 0 (``v`` bfloat16 values: hi alone is v)."""
    hi = to_bf16(v)
    lo = to_bf16(np.asarray(v, np.float32) - from_bf16(hi))
    return hi, (lo if lo.any() else None)


def on_bf16_grid(v: np.ndarray) -> np.ndarray:
    """float32 ``v`` rounded to the nearest bfloat16 value, as float32.

    >>> on_bf16_grid(np.array([1.0, 1.0 + 2.0 ** -9, 1.0 + 3 * 2.0 ** -9], np.float32)).tolist()
    [1.0, 1.0, 1.0078125]
    """
    return from_bf16(to_bf16(v))


def is_bf16(v: np.ndarray) -> bool:
    """Whether every value of ``v`` (any float dtype) is a bfloat16 value: its float32 bits end in 16 zeros."""
    bits = np.ascontiguousarray(v, np.float32).view(np.uint32)
    return not (bits & np.uint32(0xFFFF)).any()
