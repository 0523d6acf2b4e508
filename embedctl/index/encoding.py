"""Encoding documents for any index kind: batches with a moving progress bar, and the device to use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embedctl.util.progress import Progress


def encode_with_progress(encoder: Any, items: Sequence, batch_size: int, bar: Progress) -> Any:
    """``encoder.encode_documents`` on slices of ``batch_size`` documents, advancing ``bar`` after each, so the
    bar moves every batch instead of once per call. ColBERT ``(vectors, doclens)`` or bi-encoder vectors, as
    one call would give them (a slice is padded to its own longest document rather than batched
    longest-first: ~1% more padded tokens on SciFact, where most documents reach doc_max_length)."""
    parts = []
    for lo in range(0, len(items), batch_size):
        part = items[lo:lo + batch_size]
        parts.append(encoder.encode_documents(list(part), batch_size=batch_size))
        bar.advance(len(part))
    if not parts:
        return encoder.encode_documents([], batch_size=batch_size)
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate([np.asarray(p[j]) for p in parts]) for j in range(len(parts[0])))
    return np.concatenate([np.asarray(p) for p in parts])


def default_device() -> str:
    """cuda when torch sees a GPU, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
