"""Loading the optional C kernels: plain C shared libraries built by setup.py at install and called with ctypes.

Each is optional (no compiler: the install still succeeds): the native PLAID backend needs them, the
reference backend (embedctl/index/plaid/reference.py) gives the same results without them.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
from pathlib import Path
from typing import Any

import numpy as np


def load_library(package_dir: Path, stem: str) -> ctypes.CDLL | None:
    """The library ``<package_dir>/<stem><extension suffix>``, or None when it was not built."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = Path(package_dir) / f"{stem}{suffix}"
        if path.is_file():
            return ctypes.CDLL(str(path))
    return None


def array_arg(dtype: Any) -> type:
    """A ctypes argument type (for ``argtypes``) taking a C-contiguous numpy array of ``dtype`` and passing its
    data pointer: the checks of ``numpy.ctypeslib.ndpointer(dtype, flags="C_CONTIGUOUS")`` (anything else is
    refused with a TypeError, which ctypes reports as an ArgumentError naming the argument), at about half its
    cost a call (~1 us an array less: one PLAID search passes about 30 arrays to the kernels). The address of a
    writable, non-empty array comes from ctypes' buffer view (~0.25 us against ``a.ctypes.data``'s ~1)."""
    want = np.dtype(dtype)
    view = ctypes.c_char.from_buffer

    class ArrayArg:
        @staticmethod
        def from_param(a: Any) -> ctypes.c_void_p:
            if not isinstance(a, np.ndarray) or a.dtype != want or not a.flags.c_contiguous:
                got = f"{a.dtype} array{'' if a.flags.c_contiguous else ', not C-contiguous'}" \
                    if isinstance(a, np.ndarray) else type(a).__name__
                raise TypeError(f"expected a C-contiguous {want} array, got {got}")
            # from_buffer refuses read-only buffers (an index's memory maps) and empty ones
            if a.flags.writeable and a.size:
                return ctypes.c_void_p(ctypes.addressof(view(a)))
            return ctypes.c_void_p(a.ctypes.data)

    ArrayArg.__name__ = ArrayArg.__qualname__ = f"array_arg({want})"
    return ArrayArg
