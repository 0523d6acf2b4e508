"""Shared by the nearest-centroid tests: ColBERT-like clustered vectors and the exact (float64) answer."""

import numpy as np


def clustered(n: int, num_c: int, dim: int = 64, seed: int = 0):
    """Unit vectors around ``num_c`` unit centres (noise like ColBERT residuals: best score ~0.85)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_c, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, num_c, n)] + 0.08 * rng.normal(size=(n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), centres


def exact_argmax(x, c, bias=None):
    """argmax in float64."""
    s = x.astype(np.float64) @ c.astype(np.float64).T
    return (s if bias is None else s + bias.astype(np.float64)).argmax(1)


def assert_exact(got, x, c, bias=None):
    """``got`` is the float64 argmax; where BLAS rounding decides between equal centroids (exact duplicates
    score 1e-16 apart in a blocked GEMM), the one ``got`` names must score the same and come first."""
    want = exact_argmax(x, c, bias)
    diff = np.flatnonzero(got != want)
    b = np.zeros(len(c)) if bias is None else bias.astype(np.float64)
    score = lambda idx: (x[diff].astype(np.float64) * c[idx].astype(np.float64)).sum(1) + b[idx]  # noqa: E731
    np.testing.assert_allclose(score(got[diff]), score(want[diff]), rtol=0, atol=1e-12)
    assert (got[diff] < want[diff]).all(), "an exact tie goes to the first centroid"


def assert_exact_on_near_ties(nearest, twin_distance: float, min_scale: float):
    """The hard cases for a bounded-precision kernel: every centroid has a twin ``twin_distance`` away (inside
    the kernel's rounding bound) and 50 exact duplicates (the first index must win), for inner product and
    for L2 (bias ``-|c|^2 / 2``) on centroids rescaled by ``min_scale``..1. ``nearest(x, c, bias)`` is a
    backend's assignment, returning (codes, scores)."""
    x, c = clustered(3000, 512, seed=1)
    rng = np.random.default_rng(2)
    c = np.concatenate([c, c + twin_distance * rng.normal(size=c.shape).astype(np.float32), c[:50]])
    assert_exact(nearest(x, c, None)[0], x, c)
    scaled = c * rng.uniform(min_scale, 1.0, size=(len(c), 1)).astype(np.float32)
    bias = (-0.5 * (scaled * scaled).sum(1)).astype(np.float32)
    assert_exact(nearest(x, scaled, bias)[0], x, scaled, bias)
