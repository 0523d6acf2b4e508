"""The backend of a PLAID run: one object, chosen once from (device, requested precision), that does every
computation of indexing and search.

- ``reference`` (:class:`~embedctl.index.plaid.reference.Backend`): the plain, exact code of embedctl/index/plaid/reference.py. Used where the
  C kernels were not built (no compiler at install) or when asked for (``index.backend=reference``).
- ``native`` (:class:`~embedctl.index.plaid.native_backend.NativeBackend`): the C kernels built at install
  (plain C loaded with ctypes), on the CPU. Its ``precision`` picks the nearest-centroid arithmetic when
  indexing (``int16`` on AVX2, ``int8`` on AVX-512 VNNI, ``bf16`` on AMX, ``fp32`` the reference's; all exact) and the final MaxSim
  arithmetic when searching (``fp32``; ``fp16``, its table rounded to float16, the default where that runs on
  AVX-512; ``bf16``, the default on CPUs with AMX tiles).
- ``torch`` (:class:`TorchBackend`): a GPU (``device`` is not ``cpu``): nearest-centroid assignment in fp32
  torch on the device; compression and the stored norms in the native C passes on every CPU core where the
  kernels were built (the reference's arithmetic), the rest as the reference.

The indexer records ``backend.describe()`` in the build ledger and the index metadata: a resume refuses a
different backend (the bytes would differ), a search with another backend says so. Every backend is
checked against the reference on the same inputs (tests/index/test_backends.py): exactly where
``exact_assignment`` is True, within the bound each method's docstring states otherwise.
"""

from __future__ import annotations

import numpy as np

from embedctl.errors import ConfigError
from embedctl.index.plaid import native_backend
from embedctl.index.plaid.reference import Backend

BACKEND_NAMES = ("auto", "native", "reference", "torch")
INDEX_PRECISIONS = ("auto", "fp32", "int16", "int8", "bf16")
SEARCH_PRECISIONS = ("auto", "fp32", "fp16", "bf16")


class TorchBackend(Backend):
    """A GPU: assignment (k-means, compression) in fp32 torch on ``device``; the compression's bucket pass and
    the stored norms in the native C passes on every CPU core where the kernels were built (the reference's
    arithmetic; its numpy runs them on one core), the rest as the reference.

    Not exact: fp32 sums may pick a centroid whose exact score is below the best by at most
    ``2^-22 * dim * |x| * max|c|`` (rounding of the fp32 dot products)."""

    name = "torch"
    exact_assignment = False

    def nearest(self, x: np.ndarray, centroids: np.ndarray, bias: np.ndarray | None = None,
                hints: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        import torch

        x = np.ascontiguousarray(x, dtype=np.float32)
        c = torch.from_numpy(np.ascontiguousarray(centroids, np.float32)).to(self.device)
        b = None if bias is None else torch.from_numpy(np.asarray(bias, np.float32)).to(self.device)
        codes = np.empty(len(x), dtype=np.int32)
        best = np.empty(len(x), dtype=np.float32)
        with torch.inference_mode():
            for lo in range(0, len(x), 1 << 16):
                s = torch.from_numpy(x[lo:lo + (1 << 16)]).to(self.device) @ c.T
                if b is not None:
                    s += b
                value, index = s.max(dim=1)
                codes[lo:lo + len(index)] = index.to(torch.int32).cpu().numpy()
                best[lo:lo + len(index)] = value.cpu().numpy()
        return codes, best

    def compress(self, emb, centroids, codes, cutoffs, nbits):
        if native_backend.available():
            return native_backend.compress_rows(emb, centroids, codes, cutoffs, nbits)
        return super().compress(emb, centroids, codes, cutoffs, nbits)

    def decoded_norms(self, centroids, codes, packed, weights, nbits):
        if native_backend.available():
            return native_backend.decoded_norms_rows(centroids, codes, packed, weights, nbits)
        return super().decoded_norms(centroids, codes, packed, weights, nbits)


# -- choosing a backend -----------------------------------------------------------------------------
def index_backend(device: str = "cpu", precision: str = "auto", name: str = "auto") -> Backend:
    """The backend that builds an index: ``index.backend`` / ``index.assign_precision`` on ``device``.

    ``auto``: ``torch`` on a GPU, else ``native`` where the C kernels were built, else ``reference``;
    the native precision ``auto`` is ``bf16`` on CPUs with AMX, else ``int8`` with AVX-512 VNNI, else ``int16``
    where its AVX2 kernel runs, else ``fp32``."""
    _check(name, BACKEND_NAMES, "index.backend")
    _check(precision, INDEX_PRECISIONS, "index.assign_precision")
    chosen = _resolve_name(name, device, "index.backend")
    if chosen == "reference":
        return Backend(device=device)
    if chosen == "torch":
        return TorchBackend("fp32", device)
    return native_backend.NativeBackend(native_backend.index_precision(precision), device)


def search_backend(device: str = "cpu", precision: str = "auto", name: str = "auto") -> Backend:
    """The backend that searches: ``search.backend`` / ``search.precision`` (the final MaxSim's arithmetic:
    ``auto`` is ``fp16`` where its table runs on AVX-512, else ``fp32``; ``bf16`` only when asked for)."""
    _check(name, BACKEND_NAMES, "search.backend")
    _check(precision, SEARCH_PRECISIONS, "search.precision")
    chosen = _resolve_name(name, "cpu", "search.backend")  # search stages run on the CPU
    if chosen == "reference":
        return Backend(device=device)
    return native_backend.NativeBackend(native_backend.search_precision(precision), device)


def available_backends(purpose: str = "index") -> list[Backend]:
    """Every backend that runs on this machine (the reference first), for tests and benchmarks."""
    found: list[Backend] = [Backend()]
    if native_backend.available():
        precisions = native_backend.runnable_precisions(purpose)
        found += [native_backend.NativeBackend(p) for p in precisions]
    return found


def _resolve_name(name: str, device: str, key: str) -> str:
    if name == "auto":
        if device != "cpu":
            return "torch"
        return "native" if native_backend.available() else "reference"
    if name == "native" and not native_backend.available():
        raise ConfigError([f"`{key}` = native: the C kernels were not built at install (no C compiler); "
                           f"use {key}=auto or {key}=reference"])
    if name == "torch" and device == "cpu":
        raise ConfigError([f"`{key}` = torch runs on a GPU, but the device is the CPU; use {key}=auto"])
    return name


def _check(value: str, allowed: tuple[str, ...], key: str) -> None:
    if value not in allowed:
        raise ConfigError([f"`{key}` = {value!r}: expected one of {', '.join(allowed)}; use {key}=auto"])
