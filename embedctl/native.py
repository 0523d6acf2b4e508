"""Loading the optional C kernels: plain C shared libraries built by setup.py at install and called with ctypes.

Each is optional (no compiler: the install still succeeds) and every caller keeps a torch/numpy path that
gives the same results. ``EMBEDCTL_NO_KERNELS=1`` turns them all off (tests compare both paths).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
from pathlib import Path


def load_library(package_dir: Path, stem: str) -> ctypes.CDLL | None:
    """The library ``<package_dir>/<stem><extension suffix>``, or None when it was not built or is disabled."""
    if os.environ.get("EMBEDCTL_NO_KERNELS"):
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = Path(package_dir) / f"{stem}{suffix}"
        if path.is_file():
            return ctypes.CDLL(str(path))
    return None
