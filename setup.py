"""Only the optional C kernels live here; everything else is in pyproject.toml.

`embedctl.index.plaid._search_kernels` (PLAID search) and `embedctl.index.plaid._kernels` (PLAID indexing)
are plain C (no Python API) loaded with ctypes by the native PLAID backend; `embedctl.models._bf16_attention`
is the bf16 encode backend's self-attention (sequences of up to 512 tokens) and residual LayerNorm, loaded the
same way. `optional=True`:
without a C compiler the install still succeeds, PLAID runs on its reference backend (numpy/torch, same
results) and the encoder's attention on torch's SDPA.
The search kernels split one query across threads with OpenMP (search.query_threads) where the compiler
has it (-fopenmp, checked here; EMBEDCTL_NO_OPENMP=1 builds without); without it they build the same, one
thread per query (and the attention kernel, one thread per call).
"""

import os
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FLAGS = ["-O3", "-std=c99"]
# the extensions built with -fopenmp where it works
OPENMP = ["embedctl.index.plaid._search_kernels", "embedctl.models._bf16_attention"]


class BuildExt(build_ext):
    """-fopenmp for the OPENMP extensions when the compiler compiles and links an OpenMP program."""

    def build_extensions(self):
        if not os.environ.get("EMBEDCTL_NO_OPENMP") and self._openmp_works():
            for ext in self.extensions:
                if ext.name in OPENMP:
                    ext.extra_compile_args = list(ext.extra_compile_args) + ["-fopenmp"]
                    ext.extra_link_args = list(ext.extra_link_args) + ["-fopenmp"]
        super().build_extensions()

    def _openmp_works(self) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "omp_check.c")
            with open(src, "w") as f:
                f.write("#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n")
            try:
                objs = self.compiler.compile([src], output_dir=tmp, extra_postargs=["-fopenmp"])
                self.compiler.link_executable(objs, "omp_check", output_dir=tmp, extra_postargs=["-fopenmp"])
            except Exception:  # noqa: BLE001 - any compiler or linker failure: build without OpenMP
                return False
        return True


setup(cmdclass={"build_ext": BuildExt}, ext_modules=[
    Extension("embedctl.index.plaid._search_kernels", ["embedctl/index/plaid/_search_kernels.c",
                                                        "embedctl/index/plaid/_warp_kernels.c",
                                                        "embedctl/index/plaid/_warp_probes.c",
                                                        "embedctl/index/plaid/_search_amx.c"],
              depends=["embedctl/index/plaid/_search_common.h", "embedctl/index/plaid/_amx_common.h"],
              extra_compile_args=FLAGS, optional=True),
    Extension("embedctl.index.plaid._kernels", ["embedctl/index/plaid/_kernels.c", "embedctl/index/plaid/_kernels_amx.c",
                                                 "embedctl/index/plaid/_kernels_i16.c",
                                                 "embedctl/index/plaid/_kernels_vnni.c",
                                                 "embedctl/index/plaid/_kernels_i8.c"],
              depends=["embedctl/index/plaid/_amx_common.h", "embedctl/index/plaid/_nearest_scan.h",
                       "embedctl/index/plaid/_i16_quantize.h",
                       "embedctl/index/plaid/_vnni_tile.h"], extra_compile_args=FLAGS, optional=True),
    Extension("embedctl.models._bf16_attention", ["embedctl/models/_bf16_attention.c", "embedctl/models/_bf16_norm.c",
                                                  "embedctl/models/_bf16_linear.c"],
              extra_compile_args=FLAGS, depends=["embedctl/index/plaid/_amx_common.h"], optional=True),
])
