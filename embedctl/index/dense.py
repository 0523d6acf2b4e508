"""Dense faiss indexes over one vector per document (bi-encoder embeddings), inner-product scores.

Types (``index.dense_type``): ``flat`` exact inner product (default), ``ivf`` (IndexIVFFlat, ``index.ivf_nlist``
lists, default 4 sqrt(N), probed ``search.nprobe`` at a time), ``hnsw`` (IndexHNSWFlat, ``index.hnsw_m``,
``index.hnsw_ef_construction``; ``search.hnsw_ef_search`` at query time). With L2-normalised embeddings
the inner product is the cosine. On a machine with faiss GPU support, flat and IVF indexes are built and
searched on the GPU; the file on disk is always the CPU index (portable).

Example::

    builder = DenseBuilder(dim=384, dense_type="flat")
    builder.add(np.random.rand(1000, 384).astype("float32"))
    params = builder.write("idx/dense.faiss")
    searcher = DenseSearcher("idx/dense.faiss")
    scores, pids = searcher.search(queries, k=10)   # float32 [nq, k], int64 [nq, k] (-1 = no hit)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index.files import DENSE_FILE  # noqa: E402,F401 - its callers name the file through here
from embedctl.util import atomic


def default_nlist(num_docs: int) -> int:
    """4 sqrt(N) lists, at most N/39 so that k-means has its 39 points per centroid, at least 1."""
    return max(1, min(int(4 * math.sqrt(num_docs)), num_docs // 39))


def gpu_count() -> int:
    import faiss

    get = getattr(faiss, "get_num_gpus", None)
    return int(get()) if get is not None else 0


class DenseBuilder:
    """Collects document vectors batch by batch and builds the faiss index.

    ``flat`` and ``hnsw`` add vectors as they come (memory: the index itself); ``ivf`` keeps them until
    ``write``, then k-means trains on a document-seeded sample: faiss draws at most 256 vectors per list
    from the vectors in document order, with ``seed`` (``index.seed``) as its k-means seed, so the sample
    (and the index) never depends on how the vectors were batched or on the number of ranks encoding them.
    """

    def __init__(self, dim: int, dense_type: str = "flat", *, nlist: int | None = None, hnsw_m: int = 32,
                 hnsw_ef_construction: int = 200, seed: int = 0):
        import faiss

        if dense_type not in ("flat", "ivf", "hnsw"):
            raise EmbedctlError(f"`index.dense_type` = {dense_type!r}: expected flat, ivf or hnsw")
        self.dim, self.dense_type, self.nlist, self.seed = dim, dense_type, nlist, seed
        self.params: dict[str, Any] = {"type": dense_type, "dim": dim, "metric": "inner_product"}
        self._pending: list[np.ndarray] = []
        self.count = 0
        if dense_type == "flat":
            self.index = faiss.IndexFlatIP(dim)
        elif dense_type == "hnsw":
            self.index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = hnsw_ef_construction
            self.params.update(hnsw_m=hnsw_m, hnsw_ef_construction=hnsw_ef_construction)
        else:
            self.index = None

    def add(self, vectors: np.ndarray) -> None:
        """Append document vectors float32 [n, dim] (their pids follow the running count)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise EmbedctlError(f"dense index expects vectors of shape [n, {self.dim}], got {list(vectors.shape)}")
        if self.index is None:
            self._pending.append(vectors)
        else:
            self.index.add(vectors)
        self.count += len(vectors)

    def finish(self):
        """Return the CPU faiss index holding every added vector (trains IVF now)."""
        if self.index is not None:
            return self.index
        import faiss

        data = np.concatenate(self._pending) if self._pending else np.zeros((0, self.dim), np.float32)
        nlist = self.nlist or default_nlist(len(data))
        if nlist > len(data):
            raise EmbedctlError(f"`index.ivf_nlist` = {nlist} is more than the {len(data)} documents",
                                hint="lower index.ivf_nlist or use index.dense_type=flat for small collections")
        quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = self.seed  # the training sample (beyond 256 per list) and the initial centroids
        index.train(_maybe_gpu_train(index, data))
        index.add(data)
        self.params.update(ivf_nlist=nlist, seed=self.seed)
        self._pending = []
        self.index = index
        return index

    def write(self, path: str | Path) -> dict[str, Any]:
        """Write the index (faiss binary format, temp name + rename); returns its parameters."""
        import faiss

        index = self.finish()
        with atomic.atomic_path(path) as tmp:
            faiss.write_index(index, str(tmp))
        return {**self.params, "num_vectors": int(index.ntotal)}


def _maybe_gpu_train(index, data: np.ndarray) -> np.ndarray:
    """IVF k-means runs on the GPU through faiss's clustering index when one is present."""
    if gpu_count() > 0:
        import faiss

        index.clustering_index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatIP(data.shape[1]))
    return data


class DenseSearcher:
    """Loads a dense index file (memory-mapped for flat/IVF when possible) and searches batches of queries."""

    def __init__(self, path: str | Path, *, use_gpu: bool | None = None):
        import faiss

        path = Path(path)
        if not path.is_file():
            raise EmbedctlError(f"dense index file missing: {path}", hint="rebuild the index with `embedctl index`")
        try:
            self.index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError:  # e.g. HNSW cannot be memory-mapped in some faiss builds
            self.index = faiss.read_index(str(path))
        self.dim = int(self.index.d)
        self.ntotal = int(self.index.ntotal)
        self.on_gpu = False
        self.default_nprobe = int(getattr(self.index, "nprobe", 1))
        if (use_gpu if use_gpu is not None else gpu_count() > 0) and not _is_hnsw(self.index):
            self.index = faiss.index_cpu_to_all_gpus(self.index)
            self.on_gpu = True

    def search(self, queries: np.ndarray, k: int, *, nprobe: int | None = None,
               ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product. queries float32 [nq, dim] -> (scores float32 [nq, k'], pids int64 [nq, k']).

        k' = min(k, number of documents); a pid of -1 marks a missing hit (IVF/HNSW may find fewer).
        """
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise EmbedctlError(f"query vectors have shape {list(queries.shape)}, the index holds {self.dim}-d vectors",
                                hint="search with the model the index was built with")
        k = min(k, self.ntotal)
        if k <= 0 or len(queries) == 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        if self.on_gpu:  # GPU indexes take nprobe as a setting: set it on every call, so it never sticks
            if hasattr(self.index, "nprobe") or "IVF" in type(self.index).__name__:
                import faiss

                faiss.GpuParameterSpace().set_index_parameter(self.index, "nprobe", nprobe or self.default_nprobe)
            scores, pids = self.index.search(queries, k)
            return scores, pids.astype(np.int64, copy=False)
        params = self._params(nprobe, ef_search)
        if params is not None:
            scores, pids = self.index.search(queries, k, params=params)
        else:
            scores, pids = self.index.search(queries, k)
        return scores, pids.astype(np.int64, copy=False)

    def search_allowed(self, queries: np.ndarray, k: int, allowed: np.ndarray, *, nprobe: int | None = None,
                       ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k among the ``allowed`` ids only (bool [ntotal]): a faiss id selector (IDSelectorBitmap) in the
        search parameters, so the index itself skips the others (pre-filtering). An IVF or HNSW search that
        finds fewer than min(k, allowed) (a selective filter with few probed lists / graph neighbours) is
        answered by exact inner products over the allowed vectors instead: k hits whenever k ids pass."""
        import faiss

        queries = np.ascontiguousarray(queries, dtype=np.float32)
        n_allowed = int(np.count_nonzero(allowed))
        k = min(k, n_allowed)
        if k <= 0 or len(queries) == 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        bits = np.packbits(np.asarray(allowed, dtype=bool), bitorder="little")
        selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
        if self.on_gpu:
            return self._exact_allowed(queries, k, allowed)
        if hasattr(self.index, "nprobe"):
            params = faiss.SearchParametersIVF(sel=selector, nprobe=nprobe or self.default_nprobe)
        elif _is_hnsw(self.index):
            params = faiss.SearchParametersHNSW(sel=selector, efSearch=ef_search or int(self.index.hnsw.efSearch))
        else:
            params = faiss.SearchParameters(sel=selector)
        scores, pids = self.index.search(queries, k, params=params)
        del bits  # the selector reads it during the search only
        if (pids < 0).any():
            return self._exact_allowed(queries, k, allowed)
        return scores, pids.astype(np.int64, copy=False)

    def _exact_allowed(self, queries: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.flatnonzero(allowed).astype(np.int64)
        if hasattr(self.index, "make_direct_map"):
            self.index.make_direct_map()
        vectors = np.stack([self.index.reconstruct(int(i)) for i in ids])
        scores = queries @ vectors.T
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, order, axis=1).astype(np.float32), ids[order]

    def _params(self, nprobe: int | None, ef_search: int | None):
        import faiss

        if nprobe is not None and hasattr(self.index, "nprobe"):
            return faiss.SearchParametersIVF(nprobe=nprobe)
        if ef_search is not None and _is_hnsw(self.index):
            return faiss.SearchParametersHNSW(efSearch=ef_search)
        return None  # per call, never sticky: defaults stay the index's own


def _is_hnsw(index) -> bool:
    return "HNSW" in type(index).__name__
