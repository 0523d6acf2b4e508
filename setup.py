"""Only the optional C kernels live here; everything else is in pyproject.toml.

`embedctl.index.plaid._search_kernels` (PLAID search) and `embedctl.index.plaid._kernels` (PLAID indexing)
are plain C (no Python API) loaded with ctypes by the native PLAID backend. `optional=True`: without a C
compiler the install still succeeds and PLAID runs on its reference backend (numpy/torch, same results).
"""

from setuptools import Extension, setup

FLAGS = ["-O3", "-std=c99"]
setup(ext_modules=[
    Extension("embedctl.index.plaid._search_kernels", ["embedctl/index/plaid/_search_kernels.c",
                                                        "embedctl/index/plaid/_warp_kernels.c"],
              depends=["embedctl/index/plaid/_search_common.h"], extra_compile_args=FLAGS, optional=True),
    Extension("embedctl.index.plaid._kernels", ["embedctl/index/plaid/_kernels.c", "embedctl/index/plaid/_kernels_amx.c",
                                                 "embedctl/index/plaid/_kernels_i16.c",
                                                 "embedctl/index/plaid/_kernels_vnni.c",
                                                 "embedctl/index/plaid/_kernels_i8.c"],
              depends=["embedctl/index/plaid/_nearest_scan.h", "embedctl/index/plaid/_i16_quantize.h"], extra_compile_args=FLAGS, optional=True),
])
