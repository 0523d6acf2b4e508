"""Only the optional C kernels live here; everything else is in pyproject.toml.

`embedctl.search._kernels` (PLAID search) and `embedctl.index.plaid._kernels` (PLAID indexing) are plain C
(no Python API) loaded with ctypes. `optional=True`: without a C compiler the install still succeeds and
search and indexing use their numpy/torch versions of the same stages.
"""

from setuptools import Extension, setup

FLAGS = ["-O3", "-std=c99"]
setup(ext_modules=[
    Extension("embedctl.search._kernels", ["embedctl/search/_kernels.c"], extra_compile_args=FLAGS, optional=True),
    Extension("embedctl.index.plaid._kernels", ["embedctl/index/plaid/_kernels.c", "embedctl/index/plaid/_kernels_amx.c",
                                                 "embedctl/index/plaid/_kernels_i16.c"],
              depends=["embedctl/index/plaid/_nearest_scan.h"], extra_compile_args=FLAGS, optional=True),
])
