"""Large scratch arrays on small pages.

numpy advises the kernel to back every array of 4 MB or more with transparent huge pages (2 MB). Where the
first touch of a huge page is slow (a VM whose host backs guest memory lazily: this project's bench hosts
zeroed fresh huge pages at ~0.5 GB/s), a large array written once and dropped paid more for its pages than for
its contents. Timed inside a SciFact PLAID build on a 2-core AMX host (wrappers around the functions, advice on
and off): putting the encoder's output in input order 0.94 s against 0.21 s, reading the k-means sample 0.36
against 0.18, the chunk's sample documents 0.28 against 0.12. Builds alternating with the tree before this
module and the single copy into input order (index/encoding.py; bench/results/x86_64-amx-2c/
plaid_build_rest_pages.json): encode 30.0 / 31.7 s against 31.9 / 34.1.
:func:`scratch_empty` maps such arrays anonymously without that advice; where huge pages are the system
default (``always``) they still get them.
"""

from __future__ import annotations

import math
import mmap

import numpy as np

LARGE_BYTES = 4 << 20  # numpy's own threshold for the huge-page advice


def scratch_empty(shape: tuple[int, ...] | int, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, from an anonymous mapping (no huge-page advice) when it takes LARGE_BYTES or
    more: for large arrays written once, read a few times and dropped (the mapping is released with the last
    array viewing it)."""
    shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    if count * dtype.itemsize < LARGE_BYTES:
        return np.empty(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, count * dtype.itemsize), dtype=dtype, count=count).reshape(shape)
