"""Only the optional C kernels live here; everything else is in pyproject.toml.

`embedctl.search._kernels` is plain C (no Python API) loaded with ctypes. `optional=True`: without a C
compiler the install still succeeds and search uses its numpy/torch versions of the same stages.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("embedctl.search._kernels", ["embedctl/search/_kernels.c"],
                             extra_compile_args=["-O3", "-std=c99"], optional=True)])
