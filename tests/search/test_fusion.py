"""Hybrid fusion (embedctl.search.fusion): weighted RRF and min-max score fusion, deterministic ties."""

from __future__ import annotations

import numpy as np

from embedctl.search.fusion import fuse, normalised, rrf, score_fusion


def ranking(pids, scores):
    return np.asarray(pids, np.int64), np.asarray(scores, np.float32)


def test_rrf_sums_weight_over_k_plus_rank():
    a, b = ranking([1, 2, 3], [9, 5, 1]), ranking([3, 4], [100, 50])
    pids, scores = rrf([a, b], [1.0, 1.0], rrf_k=60, k=10)
    expect = {1: 1 / 61, 2: 1 / 62, 3: 1 / 63 + 1 / 61, 4: 1 / 62}
    assert pids.tolist() == [3, 1, 2, 4]  # 2 and 4 tie: the smaller pid first
    assert np.allclose(scores, [expect[p] for p in pids.tolist()])
    only_b = rrf([a, b], [0.0, 1.0], rrf_k=60, k=2)[0]
    assert only_b.tolist() == [3, 4]


def test_score_fusion_normalises_each_side_and_weights_them():
    a, b = ranking([1, 2, 3], [10, 6, 2]), ranking([3, 1], [8, 4])
    pids, scores = score_fusion([a, b], [0.5, 0.5], k=3)
    # a: 1 -> 1, 2 -> 0.5, 3 -> 0; b: 3 -> 1, 1 -> 0
    assert pids.tolist() == [1, 3, 2] and np.allclose(scores, [0.5, 0.5, 0.25])
    assert normalised(np.array([3.0, 3.0])).tolist() == [1.0, 1.0]
    assert fuse(a, b, "score", 1.0, 60, 2)[0].tolist() == [1, 2]
    assert fuse(a, b, "rrf", 0.0, 60, 1)[0].tolist() == [3]
    empty = ranking([], [])
    assert fuse(empty, empty, "rrf", 0.5, 60, 5)[0].tolist() == []
