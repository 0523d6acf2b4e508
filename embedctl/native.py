"""Loading the optional C kernels: plain C shared libraries built by setup.py at install and called with ctypes.

Each is optional (no compiler: the install still succeeds): the native PLAID backend needs them, the
reference backend (embedctl/index/plaid/reference.py) gives the same results without them.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
from pathlib import Path


def load_library(package_dir: Path, stem: str) -> ctypes.CDLL | None:
    """The library ``<package_dir>/<stem><extension suffix>``, or None when it was not built."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = Path(package_dir) / f"{stem}{suffix}"
        if path.is_file():
            return ctypes.CDLL(str(path))
    return None
