"""Fusing two rankings of one query (hybrid search: the neural side and the lexical side).

- :func:`rrf`: reciprocal rank fusion (Cormack et al. 2009): a document's score is the sum over the
  rankings that hold it of ``weight / (rrf_k + rank)`` (rank from 1); only ranks matter, so scores of
  different scales (MaxSim sums, inner products, BM25) need no calibration.
- :func:`score_fusion`: each ranking's scores min-max normalised to [0, 1] over the hits it returned (all
  equal: 1), then ``weight * neural + (1 - weight) * lexical``; a document missing from a ranking gets 0
  from it (next-plaid's and Qdrant's relative-score fusion).

Ties break by the smaller pid, so a fusion is deterministic. Rankings are ``(pids int64, scores float32)``
best first, as the retrievers return them.

    >>> import numpy as np
    >>> a = (np.array([1, 2, 3]), np.array([3.0, 2.0, 1.0], np.float32))
    >>> b = (np.array([3, 1]), np.array([9.0, 1.0], np.float32))
    >>> rrf([a, b], [0.5, 0.5], rrf_k=60, k=2)[0].tolist()
    [1, 3]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Ranking = tuple[np.ndarray, np.ndarray]
METHODS = ("rrf", "score")


def _top(scores: dict[int, float], k: int) -> Ranking:
    if not scores:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    pids = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    vals = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    order = np.lexsort((pids, -vals))[:k]
    return pids[order], vals[order].astype(np.float32)


def rrf(rankings: Sequence[Ranking], weights: Sequence[float], rrf_k: int = 60, k: int = 10) -> Ranking:
    """Weighted reciprocal rank fusion of ``rankings`` -> the top ``k`` (pids, fused scores)."""
    fused: dict[int, float] = {}
    for (pids, _), weight in zip(rankings, weights, strict=True):
        for rank, pid in enumerate(np.asarray(pids, np.int64).tolist(), start=1):
            fused[pid] = fused.get(pid, 0.0) + weight / (rrf_k + rank)
    return _top(fused, k)


def normalised(scores: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1] (all equal: 1)."""
    scores = np.asarray(scores, np.float64)
    if len(scores) == 0:
        return scores
    lo, hi = float(scores.min()), float(scores.max())
    return np.ones_like(scores) if hi <= lo else (scores - lo) / (hi - lo)


def score_fusion(rankings: Sequence[Ranking], weights: Sequence[float], k: int = 10) -> Ranking:
    """Weighted sum of min-max normalised scores -> the top ``k`` (pids, fused scores)."""
    fused: dict[int, float] = {}
    for (pids, scores), weight in zip(rankings, weights, strict=True):
        for pid, s in zip(np.asarray(pids, np.int64).tolist(), normalised(scores).tolist(), strict=True):
            fused[pid] = fused.get(pid, 0.0) + weight * s
    return _top(fused, k)


def fuse(neural: Ranking, lexical: Ranking, method: str, neural_weight: float, rrf_k: int, k: int) -> Ranking:
    """The hybrid ranking of one query (``search.fusion``, ``search.hybrid_weight``, ``search.rrf_k``)."""
    weights = (neural_weight, 1.0 - neural_weight)
    if method == "rrf":
        return rrf((neural, lexical), weights, rrf_k, k)
    if method == "score":
        return score_fusion((neural, lexical), weights, k)
    raise ValueError(f"unknown fusion {method!r}; expected one of {', '.join(METHODS)}")
