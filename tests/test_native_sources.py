"""Every C source of the package (embedctl/**/*.c, built by setup.py into the optional native libraries) compiles
where its x86-64 paths are left out: clang, macOS and Arm builds take only the plain code and the stubs that
report "unavailable". EMBEDCTL_PORTABLE, honoured by every source's guard, stands in for those compilers here
(a constant defined only beside the AVX-512 paths once broke that build, and embedctl fell back to the
reference backend wherever it was installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import embedctl

SOURCES = sorted(Path(embedctl.__file__).parent.rglob("*.c"))


def test_the_sources_are_found():
    assert {p.name for p in SOURCES} >= {"_kernels.c", "_search_kernels.c", "_warp_kernels.c", "_bf16_attention.c"}


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
@pytest.mark.parametrize("source", SOURCES, ids=[p.name for p in SOURCES])
def test_each_source_compiles_without_its_x86_paths(source):
    done = subprocess.run(["cc", "-std=c99", "-fsyntax-only", "-DEMBEDCTL_PORTABLE", str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
