"""stable_argsort gives np.argsort(kind="stable")'s permutation, whatever the keys."""

from __future__ import annotations

import numpy as np
import pytest

from embedctl.util.sorting import stable_argsort


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16, np.uint32, np.uint64, np.int8])
@pytest.mark.parametrize("high", [1, 3, 2000, 70_000, 2**33])
def test_equals_numpy_stable_argsort(dtype, high):
    rng = np.random.default_rng(high)
    high = min(high, np.iinfo(dtype).max)
    keys = rng.integers(0, high, 5000, endpoint=True).astype(dtype)  # many ties: stability shows
    np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


def test_an_ivf_transposed():
    """The PLAID searcher's use: pids of concatenated per-centroid sorted lists, ordered by pid then list."""
    ivf = np.array([0, 2, 5, 1, 2, 0, 5, 5], dtype=np.int32)
    np.testing.assert_array_equal(stable_argsort(ivf), [0, 5, 3, 1, 4, 2, 6, 7])


@pytest.mark.parametrize("keys", [np.array([], np.int64), np.array([3, -1, 3, 0]), np.array([0.5, 0.1, 0.5]),
                                  np.array([2**63 - 1, 0, 2**40], np.int64), np.array([7])])
def test_edge_keys(keys):
    np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))
