"""Nearest-centroid assignment: bfloat16 fast path against exact fp32, L2 bias, k-means on both paths."""

import numpy as np
import pytest
from support.assignhelpers import clustered as _clustered

from embedctl.errors import EmbedctlError
from embedctl.index.plaid import assign, kernels, kmeans


@pytest.mark.parametrize("num_c", [100, 1000, 2048])  # 2048 takes the 128-group argmax, 100 a plain one
def test_bf16_matches_fp32_up_to_near_ties(num_c):
    x, c = _clustered(5000, num_c)
    exact = assign.nearest(x, c, "fp32")
    fast = assign.nearest(x, c, "bf16")
    assert fast.dtype == np.int32 and fast.shape == exact.shape
    assert (fast == exact).mean() >= 0.99
    loss = (x * c[exact]).sum(1) - (x * c[fast]).sum(1)
    assert loss.max() <= 0.005, "a different answer is only ever a near tie"


def test_exact_path_equals_brute_force_argmax():
    x, c = _clustered(777, 300, seed=1)
    np.testing.assert_array_equal(assign.nearest(x, c, "fp32"), (x @ c.T).argmax(1))


def test_bias_turns_inner_product_into_l2():
    x, c = _clustered(3000, 256, seed=2)
    c = c * np.random.default_rng(3).uniform(0.5, 1.0, size=(len(c), 1)).astype(np.float32)  # unequal norms
    l2 = ((x[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
    bias = -0.5 * (c * c).sum(1)
    np.testing.assert_array_equal(assign.nearest(x, c, "fp32", bias=bias), l2)
    assert (assign.nearest(x, c, "bf16", bias=bias) == l2).mean() >= 0.99


def test_empty_input_and_read_only_input():
    x, c = _clustered(100, 64)
    assert assign.nearest(x[:0], c, "bf16").shape == (0,)
    x.setflags(write=False)
    assert assign.nearest(x, c, "bf16").shape == (100,)


def test_resolve_precision():
    assert assign.resolve_precision("fp32") == "fp32"
    assert assign.resolve_precision("bf16") == "bf16"
    assert assign.resolve_precision("bf16", device="cuda") == "fp32"
    assert assign.resolve_precision("int16") == "int16"
    assert assign.resolve_precision("int16", device="cuda") == "fp32"
    assert assign.resolve_precision("auto") in ("fp32", "bf16", "int16")
    with pytest.raises(EmbedctlError, match="index.assign_precision"):
        assign.resolve_precision("int8")


def test_kmeans_bf16_is_seeded_and_as_good_as_fp32():
    x, _ = _clustered(8000, 64, seed=4)
    a = kmeans.train_centroids(x, 64, niters=4, seed=5, precision="bf16")
    b = kmeans.train_centroids(x, 64, niters=4, seed=5, precision="bf16")
    np.testing.assert_array_equal(a, b)
    assert a.shape == (64, 64) and a.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(a.astype(np.float32), axis=1), 1.0, atol=1e-3)

    def fit(cent):
        cent = cent.astype(np.float32)
        return (x * cent[assign.nearest(x, cent, "fp32")]).sum(1).mean()

    ref = kmeans.train_centroids(x, 64, niters=4, seed=5, precision="fp32")
    assert fit(a) >= fit(ref) - 0.01


def test_kmeans_with_torch_assignment_is_the_same_kmeans():
    """The route a CUDA indexer takes when faiss has no GPUs (the PyPI faiss-cpu wheel): faiss's Python
    k-means with the fp32 assignment in torch on the indexer's device, run here on the CPU."""
    x, _ = _clustered(8000, 64, seed=4)
    a = kmeans._contrib_kmeans(x, 64, 4, 5, "fp32", torch_device="cpu")
    np.testing.assert_array_equal(a, kmeans._contrib_kmeans(x, 64, 4, 5, "fp32", torch_device="cpu"))
    if kernels.i16_available():  # the same algorithm and seed as the exact kernel route
        np.testing.assert_allclose(a, kmeans._contrib_kmeans(x, 64, 4, 5, "int16"), atol=1e-5)
    ref = kmeans.train_centroids(x, 64, niters=4, seed=5, precision="fp32")  # faiss's C++ k-means
    unit = a / np.linalg.norm(a, axis=1, keepdims=True)  # train_centroids normalises what k-means returns
    fit = [(x * c[assign.nearest(x, c, "fp32")]).sum(1).mean() for c in (unit, ref.astype(np.float32))]
    assert fit[0] >= fit[1] - 0.01
