"""Encoding documents for any index kind: batches with a moving progress bar, and the device to use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embedctl.util.progress import Progress


def encode_with_progress(encoder: Any, items: Sequence, batch_size: int, bar: Progress) -> Any:
    """``encoder.encode_documents`` in batches of ``batch_size`` documents, advancing ``bar`` after each, so
    the bar moves every batch instead of once per call. ColBERT ``(vectors, doclens)`` or bi-encoder vectors
    in input order, as one call would give them.

    Length bucketing: an encoder that can tokenize (``document_ids``) has every document tokenized once, and
    the batches are cut from the documents sorted longest first, so a batch pads to its own longest
    document, not to the longest of ``batch_size`` documents taken in input order (the padding was
    encoded and thrown away). Each document's vectors do not depend on its batch (up to fp32 rounding of
    other matrix shapes); the batches depend only on ``items``, so a rerun gives the same bytes."""
    ids = encoder.document_ids(items) if hasattr(encoder, "document_ids") else list(items)
    if hasattr(encoder, "document_ids") and len(ids) > 1:
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(-lengths, kind="stable")
    else:
        order = np.arange(len(ids))
    parts = []
    for lo in range(0, len(ids), batch_size):
        part = [ids[i] for i in order[lo:lo + batch_size]]
        parts.append(encoder.encode_documents(part, batch_size=batch_size))
        bar.advance(len(part))
    if not parts:
        return encoder.encode_documents([], batch_size=batch_size)
    if isinstance(parts[0], tuple):
        vectors = np.concatenate([np.asarray(p[0]) for p in parts])
        doclens = np.concatenate([np.asarray(p[1]) for p in parts])
        return _input_order(vectors, doclens, order)
    vectors = np.concatenate([np.asarray(p) for p in parts])
    out = np.empty_like(vectors)
    out[order] = vectors
    return out


def _input_order(vectors: np.ndarray, doclens: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ColBERT output of documents ``order`` (vectors concatenated in that order) back in input order."""
    if np.array_equal(order, np.arange(len(order))):
        return vectors, doclens
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))  # input document j sits at sorted position rank[j]
    starts = np.concatenate([[0], np.cumsum(doclens)[:-1]])  # of each sorted position
    lens = doclens[rank]
    out_starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    gather = np.repeat(starts[rank] - out_starts, lens) + np.arange(int(lens.sum()))
    return vectors[gather], lens


def default_device() -> str:
    """cuda when torch sees a GPU, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
