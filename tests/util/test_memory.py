"""util.memory.scratch_empty: large arrays from an anonymous mapping without numpy's huge-page advice."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from embedctl.util.memory import LARGE_BYTES, scratch_empty


def test_small_and_large_arrays_have_the_shape_and_dtype_asked_for_and_are_writable():
    for shape, dtype in (((3, 4), np.float32), (10, np.int64), ((0, 128), np.float32),
                         ((LARGE_BYTES // 512 + 1, 128), np.float32), ((LARGE_BYTES // 2 + 7,), np.int16)):
        a = scratch_empty(shape, dtype)
        assert a.shape == ((shape,) if isinstance(shape, int) else shape) and a.dtype == dtype
        a[...] = 7
        assert a.flags.writeable and a.flags.c_contiguous and (a == 7).all()


def test_a_large_array_views_torch_and_numpy_alike():
    torch = pytest.importorskip("torch")
    a = scratch_empty((LARGE_BYTES // 256, 64), np.float32)
    a[:] = np.arange(64, dtype=np.float32)
    t = torch.from_numpy(a)
    t[0, 0] = -1.0
    assert a[0, 0] == -1.0 and float(t[1].sum()) == float(np.arange(64).sum())


def _vm_flags(address: int) -> str:
    """The VmFlags of the mapping holding ``address`` in /proc/self/smaps."""
    current = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if m:
            current = (int(m.group(1), 16), int(m.group(2), 16))
        elif line.startswith("VmFlags:") and current and current[0] <= address < current[1]:
            return line
    return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
def test_a_large_array_is_not_advised_for_huge_pages():
    a = scratch_empty((LARGE_BYTES,), np.float32)  # 4 x the threshold
    a[:] = 0
    assert _vm_flags(a.ctypes.data) and " hg" not in _vm_flags(a.ctypes.data)  # hg: madvise(MADV_HUGEPAGE)
