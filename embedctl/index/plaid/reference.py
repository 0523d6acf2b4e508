"""The reference implementation of every PLAID computation: plain numpy/torch, exact, readable, always tested.

Each function here is the definition that a backend's fast path (embedctl/index/plaid/backends.py) must
reproduce: exactly where the backend claims exactness, within a stated bound where it does not. The
reference backend calls these functions directly, so an index built or searched without compiled kernels
runs this code.

Shapes: ``dim`` floats per vector, ``C`` centroids, ``Lq`` query tokens, ``B = dim * nbits / 8`` bytes per
packed residual, ``n`` vectors, ``m`` documents.

- assignment: :func:`nearest` (``argmax_c <x, c> + bias_c`` in float64, the first centroid on an exact tie);
  :func:`kmeans_step` (the L2 assignment and per-centroid sums k-means needs);
- compression: :func:`compress` (bucket of each residual dimension, packed ``8 / nbits`` per byte);
- decompression: :func:`decompress` and :func:`decoded_norms`;
- the best centroids of each query token: :func:`row_top` (the m best columns of each row, best first);
- centroid interaction: :func:`segment_maxsum` (per document, sum over query tokens of the max centroid
  score) and :func:`scatter_max_rows` (the same maxima gathered from IVF entries);
- MaxSim: :func:`maxsim` (per document, sum over query tokens of the max over its vectors of
  ``Q . (centroid + residual) / stored norm``);
- the same two over documents named by pid, their rows read from the index's arrays by offsets:
  :func:`doc_maxsum` and :func:`maxsim_docs` (by definition the gather, then the function above).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embedctl.index.plaid.ivf import ranges_index

ROWS_PER_BLOCK = 4096  # rows per float64 score block: [4096, C] doubles stay within ~256 MiB at C=8192


def nearest(x: np.ndarray, centroids: np.ndarray, bias: np.ndarray | None = None, hints: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """(int32 [n] the exact best centroid of each row, float32 [n] its score ``<x, c> + bias_c``).

    ``x`` float32 [n, dim], ``centroids`` float32 [C, dim], ``bias`` float32 [C] or None (``-|c|^2 / 2``
    turns inner product into L2). Scores in float64: the first centroid wins an exact tie. ``hints``: int [n]
    a likely best centroid per row (-1: none), which a fast backend may start from; never changes the answer
    (unused here).
    """
    import torch

    x = np.ascontiguousarray(x, dtype=np.float32)
    centroids = np.ascontiguousarray(centroids, dtype=np.float32)
    bias = None if bias is None else np.asarray(bias, dtype=np.float32)
    distinct = _first_copies(centroids, bias)
    cent = torch.from_numpy(centroids[distinct]).double()
    b = None if bias is None else torch.from_numpy(bias[distinct].astype(np.float64))
    codes = np.empty(len(x), dtype=np.int32)
    best = np.empty(len(x), dtype=np.float32)
    with torch.inference_mode():
        for lo in range(0, len(x), ROWS_PER_BLOCK):
            scores = torch.tensor(x[lo:lo + ROWS_PER_BLOCK], dtype=torch.float64) @ cent.T
            if b is not None:
                scores += b
            value, index = scores.max(dim=1)  # torch returns the first maximal index
            codes[lo:lo + len(index)] = distinct[index.numpy()]
            best[lo:lo + len(index)] = value.numpy()
    return codes, best


def _first_copies(centroids: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Indices of the centroids that are not a copy of an earlier one (same vector and bias), increasing.

    Why: copies must tie exactly so that the first wins, but a blocked float64 GEMM may round the same dot
    product 1e-16 apart depending on the column it lands in (seen with OpenBLAS on AMD EPYC); scoring each
    distinct centroid once, in index order, makes the first copy win by construction."""
    rows = centroids if bias is None else np.concatenate([centroids, bias[:, None]], axis=1)
    _, first = np.unique(rows, axis=0, return_index=True)
    return np.arange(len(centroids), dtype=np.int64) if len(first) == len(centroids) else np.sort(first)


def kmeans_step(x: np.ndarray, centroids: np.ndarray, nearest_fn=nearest, sq_norms: np.ndarray | None = None,
                hints: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One k-means assignment: (int64 [n] nearest centroid in L2, float32 [n] squared distance, float32 [C, dim]
    sum of the vectors assigned to each centroid). ``nearest_fn(x, centroids, bias, hints)`` is the assignment
    (a backend passes its own); the sums are exact float32 accumulations whatever it is. ``sq_norms``: float64
    [n] |x|^2 as :func:`squared_norms` gives them, when the caller keeps them across iterations (the same x).
    ``hints``: the previous iteration's assignment, when the caller keeps it (see :func:`nearest`)."""
    import torch

    cent = np.ascontiguousarray(centroids, dtype=np.float32)
    bias = (-0.5 * (cent.astype(np.float64) ** 2).sum(axis=1)).astype(np.float32)  # argmax <x,c> - |c|^2/2
    x = np.ascontiguousarray(x, dtype=np.float32)
    codes, best = nearest_fn(x, cent, bias, hints)
    if sq_norms is None:
        sq_norms = squared_norms(x)
    dist = np.maximum(sq_norms - 2.0 * best, 0.0).astype(np.float32)  # |x - c|^2 = |x|^2 - 2 (<x,c> - |c|^2/2)
    idx = torch.from_numpy(codes.astype(np.int64))
    with torch.inference_mode():
        rows = torch.from_numpy(x if x.flags.writeable else x.copy())  # torch refuses to wrap read-only arrays
        sums = torch.zeros(cent.shape, dtype=torch.float32).index_add_(0, idx, rows).numpy()
    return codes.astype(np.int64), dist, sums


def squared_norms(x: np.ndarray) -> np.ndarray:
    """float64 [n]: |x_i|^2 of float32 rows, summed in float64."""
    return np.einsum("ij,ij->i", x, x, dtype=np.float64)


def bucket_indices(values, cutoffs):
    """uint8 bucket index of each residual value: how many ``cutoffs`` it exceeds (torch.bucketize, left)."""
    import torch

    return torch.bucketize(values, cutoffs, out_int32=True).to(torch.uint8)


def pack_bits(buckets: np.ndarray, nbits: int) -> np.ndarray:
    """Pack bucket indices uint8 [n, dim] (values < 2^nbits) into uint8 [n, dim * nbits / 8], the first
    dimension in the most significant bits. nbits=2: dims (3, 0, 1, 2) -> byte 0b11_00_01_10 = 198."""
    per = 8 // nbits
    n, dim = buckets.shape
    b = buckets.reshape(n, dim // per, per).astype(np.uint8, copy=False)
    out = np.zeros((n, dim // per), dtype=np.uint8)
    for i in range(per):
        out |= b[:, :, i] << np.uint8(nbits * (per - 1 - i))
    return out


def unpack_table(nbits: int) -> np.ndarray:
    """uint8 [256, 8 / nbits]: the bucket indices stored in each possible byte value (first dim first)."""
    per = 8 // nbits
    values = np.arange(256, dtype=np.uint16)[:, None]
    shifts = nbits * np.arange(per - 1, -1, -1)[None, :]
    return ((values >> shifts) & ((1 << nbits) - 1)).astype(np.uint8)


def decode_table(weights: np.ndarray, nbits: int) -> np.ndarray:
    """float32 [256, 8 / nbits]: the residual values each byte value decodes to."""
    return np.asarray(weights, dtype=np.float32)[unpack_table(nbits)]


def compress(emb: np.ndarray, centroids: np.ndarray, codes: np.ndarray, cutoffs: np.ndarray, nbits: int) -> np.ndarray:
    """Packed residual buckets uint8 [n, B] of float32 ``emb`` [n, dim] given their centroids ``codes``."""
    import torch

    emb = np.ascontiguousarray(emb, dtype=np.float32)
    residual = torch.from_numpy(emb) - torch.from_numpy(np.asarray(centroids, np.float32))[torch.from_numpy(
        np.asarray(codes, np.int64))]
    buckets = bucket_indices(residual, torch.from_numpy(np.asarray(cutoffs, np.float32)))
    return pack_bits(buckets.numpy(), nbits)


def decompress(centroids: np.ndarray, codes: np.ndarray, packed: np.ndarray, weights: np.ndarray, nbits: int,
               normalize: bool = True) -> np.ndarray:
    """float32 [n, dim]: centroid + decoded residual of each vector (L2-normalised unless ``normalize=False``)."""
    cent = np.asarray(centroids, dtype=np.float32)
    residual = decode_table(weights, nbits)[np.asarray(packed)].reshape(len(packed), -1)
    out = cent[np.asarray(codes, np.int64)] + residual
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out


def decoded_norms(centroids: np.ndarray, codes: np.ndarray, packed: np.ndarray, weights: np.ndarray,
                  nbits: int) -> np.ndarray:
    """float32 [n]: |centroid + decoded residual| of each vector (stored, as float16, for scoring)."""
    out = np.empty(len(codes), dtype=np.float32)
    for lo in range(0, len(codes), 65536):  # bounded temporaries
        part = decompress(centroids, codes[lo:lo + 65536], packed[lo:lo + 65536], weights, nbits, normalize=False)
        out[lo:lo + len(part)] = np.linalg.norm(part, axis=1)
    return out


def row_top(ST: np.ndarray, m: int) -> np.ndarray:
    """int64 [rows, m]: the m best columns of each row of ``ST``, best first, an exact tie to the smaller column
    (a stable sort of -ST, cut to m)."""
    ST = np.asarray(ST, np.float32)
    if m >= ST.shape[1]:
        return np.argsort(-ST, axis=1, kind="stable")[:, :m].astype(np.int64)
    # the same without sorting every column: only those scoring at least the row's m-th best score
    kth = -np.partition(-ST, m - 1, axis=1)[:, m - 1]
    out = np.empty((ST.shape[0], m), dtype=np.int64)
    for r in range(ST.shape[0]):
        cols = np.flatnonzero(ST[r] >= kth[r])
        out[r] = cols[np.argsort(-ST[r, cols], kind="stable")[:m]]
    return out


def segment_maxsum(ST: np.ndarray, codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """float32 [m]: for each segment (``counts[i]`` consecutive entries of ``codes``), sum over query tokens q
    of max over its codes c of ``ST[q, c]``; -inf for an empty segment. ST float32 [Lq, C].

    One gather ``ST[:, codes]`` [Lq, n] and numpy's reduceat over the non-empty segments."""
    out = np.full(len(counts), -np.inf, dtype=np.float32)
    has = np.asarray(counts) > 0
    if has.any():
        starts = (np.cumsum(counts) - counts)[has]
        out[has] = np.maximum.reduceat(ST[:, np.asarray(codes, np.int64)], starts, axis=1).sum(axis=0)
    return out


def scatter_max_rows(ST: np.ndarray, cents: np.ndarray, slots: np.ndarray, num_slots: int) -> np.ndarray:
    """float32 [num_slots, Lq]: ``out[s, q]`` = max of ``ST[q, cents[i]]`` over entries i with ``slots[i] == s``
    (-inf where none; a negative slot is skipped). torch's index_reduce_ over rows of ST.T."""
    import warnings

    import torch

    keep = np.asarray(slots) >= 0
    rows = torch.from_numpy(np.ascontiguousarray(ST.T)).index_select(
        0, torch.from_numpy(np.asarray(cents, np.int64)[keep]))
    out = torch.full((num_slots, ST.shape[0]), -np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "index_reduce() is in beta"
        out.index_reduce_(0, torch.from_numpy(np.asarray(slots, np.int64)[keep]), rows, "amax")
    return out.numpy()


def maxsim(Q: np.ndarray, centroids: np.ndarray, codes: np.ndarray, packed: np.ndarray, norms: np.ndarray,
           lens: np.ndarray, weights: np.ndarray, nbits: int) -> np.ndarray:
    """float32 [m]: per document (``lens[i]`` consecutive vectors, each >= 1), sum over query tokens of the max
    over its vectors of ``Q[q] . (centroid + residual) / norm`` (``norms``: the stored norms, float16)."""
    vectors = decompress(centroids, codes, packed, weights, nbits, normalize=False)
    sims = (Q.astype(np.float32) @ vectors.T) / np.maximum(np.asarray(norms, np.float32), 1e-12)  # [Lq, n]
    starts = np.cumsum(lens) - lens
    return np.maximum.reduceat(sims, starts, axis=1).sum(axis=0).astype(np.float32)


def doc_maxsum(ST: np.ndarray, doc_codes: np.ndarray, offsets: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """float32 [len(pids)]: :func:`segment_maxsum` of documents whose codes are ``doc_codes[offsets[p]:offsets[p + 1]]``
    (CSR lists: the stage-4 centroid interaction of PLAID search)."""
    rows, counts = doc_rows(offsets, pids)
    return segment_maxsum(ST, np.asarray(doc_codes)[rows], counts)


def maxsim_docs(Q: np.ndarray, centroids: np.ndarray, codes: np.ndarray, packed: np.ndarray, norms: np.ndarray,
                offsets: np.ndarray, pids: np.ndarray, weights: np.ndarray, nbits: int) -> np.ndarray:
    """float32 [len(pids)]: :func:`maxsim` of documents whose vectors are rows ``offsets[p]:offsets[p + 1]`` (each
    >= 1) of ``codes``, ``packed`` and ``norms``."""
    idx, lens = doc_rows(offsets, pids)
    return maxsim(Q, centroids, np.take(codes, idx), np.take(packed, idx, axis=0), np.take(norms, idx), lens,
                  weights, nbits)


def warp_scores(Q: np.ndarray, ST: np.ndarray, cells: np.ndarray, ncells: np.ndarray, miss: np.ndarray,
                cell_offsets: np.ndarray, packed: np.ndarray, norms: np.ndarray, vec_pids: np.ndarray, num_docs: int,
                weights: np.ndarray, nbits: int) -> tuple[np.ndarray, np.ndarray]:
    """WARP-style estimates (embedctl/search/warp.py): (pids int64 ascending, float32 estimates) of the documents
    with a vector above ``miss[q]`` in some token q's probed cells. Token q scores each vector e of its cells
    ``cells[q, :ncells[q]]`` (vectors ``cell_offsets[c]:cell_offsets[c + 1]`` of the cell-ordered ``packed``,
    ``norms``, ``vec_pids``; a vector with pid -1 is padding) as ``Q[q] . (centroid_c + residual_e) /
    max(norm_e, 1e-12)``; a document's estimate is sum_q max(its best such score, ``miss[q]``): the score q
    would give a vector outside its cells, taken also where the document's vectors there all score below it."""
    table = decode_table(weights, nbits)
    sizes = np.diff(cell_offsets)
    per_token = np.empty((ST.shape[0], num_docs), dtype=np.float32)
    found_any = np.zeros(num_docs, dtype=bool)
    for q in range(ST.shape[0]):
        cs = np.asarray(cells[q, :ncells[q]], np.int64)
        idx = ranges_index(cell_offsets[cs], sizes[cs])
        residual = table[np.asarray(packed)[idx]].reshape(len(idx), -1)
        scores = (ST[q, np.repeat(cs, sizes[cs])] + residual @ Q[q]) / np.maximum(norms[idx], 1e-12)
        best = np.full(num_docs, -np.inf, dtype=np.float32)
        real = np.asarray(vec_pids)[idx] >= 0  # -1: a padding slot of the layout
        np.maximum.at(best, np.asarray(vec_pids)[idx][real], scores.astype(np.float32)[real])
        above = best > miss[q]  # only a vector above the token's estimate for the unseen changes anything
        per_token[q] = np.where(above, best, miss[q])
        found_any |= above
    pids = np.flatnonzero(found_any)
    return pids.astype(np.int64), per_token[:, pids].sum(axis=0).astype(np.float32)


def warp_probes(ST: np.ndarray, ordered: np.ndarray, cell_sizes: np.ndarray, want: float, least: int, most: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """WARP's probes per query token (embedctl/search/warp.py): (int64 [Lq] how many of its best cells
    ``ordered`` [Lq, m] (best first) each token probes, float32 [Lq] its score for a vector outside them).
    Token q probes 1 + how many of the running sums of its first ``most`` cells' sizes (``cell_sizes`` [C]) stay
    below ``want``, then at least ``least`` and at most ``most`` (1 <= least <= most <= m); its score outside
    them is ``ST[q, c]`` of its first unprobed cell c, or its lowest where every cell is probed (a tiny index)."""
    reach = np.count_nonzero(np.cumsum(cell_sizes[ordered[:, :most]], axis=1) < want, axis=1) + 1
    # np.minimum / np.maximum: np.clip's checks cost ~10 us a query here
    ncells = np.minimum(np.maximum(reach, least), most).astype(np.int64)
    rows = np.arange(ST.shape[0])
    miss = ST[rows, ordered[rows, np.minimum(ncells, ordered.shape[1] - 1)]]
    every = ncells >= ordered.shape[1]
    if every.any():  # every cell probed: no document lacks a vector there; any low value does
        miss = np.where(every, ST.min(axis=1), miss)
    return ncells, np.asarray(miss, dtype=np.float32)


def top_positions(scores: np.ndarray, n: int) -> np.ndarray:
    """int64 ascending: the positions of the n largest of ``scores`` (1 <= n < len), NaN counted as -inf, a tie
    at the n-th largest value to the earlier positions (the best candidates between PLAID's stages)."""
    scores = np.asarray(scores)
    if np.isnan(scores).any():
        scores = np.where(np.isnan(scores), -np.inf, scores)
    cut = len(scores) - n
    value = np.partition(scores, cut)[cut]
    keep = scores > value
    keep[np.flatnonzero(scores == value)[:n - int(np.count_nonzero(keep))]] = True
    return np.flatnonzero(keep)


def doc_rows(offsets: np.ndarray, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 row numbers, int64 [len(pids)] row counts) of the documents ``pids`` in CSR ``offsets``
    [num_docs + 1]: the gather of :func:`doc_maxsum` and :func:`maxsim_docs`."""
    offsets, pids = np.asarray(offsets, np.int64), np.asarray(pids, np.int64)
    counts = offsets[pids + 1] - offsets[pids]
    return ranges_index(offsets[pids], counts), counts


class Backend:
    """The reference backend: each method is the function of this module of the same name. The base class of
    the other backends (embedctl/index/plaid/backends.py), which override what they do natively."""

    name = "reference"
    exact_assignment = True  # nearest() returns the exact best centroid (first on an exact tie)

    def __init__(self, precision: str = "exact", device: str = "cpu"):
        self.precision, self.device = precision, device

    def describe(self) -> dict[str, str]:
        """What the index metadata and the ledger record: ``{"name": ..., "precision": ...}``."""
        return {"name": self.name, "precision": self.precision}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(precision={self.precision!r}, device={self.device!r})"

    # -- indexing -----------------------------------------------------------------------------------
    def nearest(self, x: np.ndarray, centroids: np.ndarray, bias: np.ndarray | None = None,
                hints: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(int32 [n] best centroid, float32 [n] its score ``<x, c> + bias_c``); see nearest."""
        return nearest(x, centroids, bias)

    def kmeans_step(self, x: np.ndarray, centroids: np.ndarray, sq_norms: np.ndarray | None = None,
                    hints: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(int64 [n] L2-nearest centroid, float32 [n] squared distance, float32 [C, dim] sums per centroid);
        ``sq_norms`` and ``hints`` as :func:`kmeans_step`'s."""
        return kmeans_step(x, centroids, self.nearest, sq_norms, hints)

    def compress(self, emb: np.ndarray, centroids: np.ndarray, codes: np.ndarray, cutoffs: np.ndarray,
                 nbits: int) -> np.ndarray:
        """Packed residual buckets uint8 [n, dim * nbits / 8]; see compress."""
        return compress(emb, centroids, codes, cutoffs, nbits)

    def decoded_norms(self, centroids: np.ndarray, codes: np.ndarray, packed: np.ndarray, weights: np.ndarray,
                      nbits: int) -> np.ndarray:
        """float32 [n] norms of the decompressed vectors; see decoded_norms."""
        return decoded_norms(centroids, codes, packed, weights, nbits)

    # -- search -------------------------------------------------------------------------------------
    def centroid_scores(self, centroids: np.ndarray, Q: np.ndarray, scratch: Any = None, threads: int = 1,
                        tables: Any = None) -> np.ndarray:
        """float32 [Lq, C] = Q @ centroids^T, held as the transpose of a C-contiguous [C, Lq] (torch's matmul).
        ``scratch``: a per-thread namespace a backend may keep its output buffer in (unused here). ``threads``
        (here and in the other search methods): the threads one query may split across (search.query_threads;
        the native kernels' OpenMP; unused here, where torch's own threads apply). ``tables``: this index's
        :meth:`search_tables`, where a backend keeps the centroids in another form (unused here)."""
        import torch

        return (torch.from_numpy(centroids) @ torch.from_numpy(np.ascontiguousarray(Q, np.float32)).T).numpy().T

    def batch_centroid_scores(self, centroids: np.ndarray, Q: np.ndarray) -> np.ndarray | None:
        """float32 [nq, Lq, C] for Q [nq, Lq, dim] in one matmul (each query's entries the same as
        :meth:`centroid_scores` of it alone), or None where the backend has no faster batch."""
        import torch

        return torch.matmul(torch.from_numpy(centroids), torch.from_numpy(Q).transpose(1, 2)).numpy().transpose(0, 2, 1)

    def search_tables(self, centroids: np.ndarray, weights: np.ndarray, nbits: int) -> Any:
        """Whatever :meth:`maxsim` needs per index, computed once when a searcher opens the index."""
        return (np.ascontiguousarray(centroids, np.float32), np.asarray(weights, np.float32), int(nbits))

    def top_positions(self, scores: np.ndarray, n: int) -> np.ndarray:
        """int64 ascending positions of the n best scores; see top_positions."""
        return top_positions(scores, n)

    def row_top(self, ST: np.ndarray, m: int, threads: int = 1) -> np.ndarray:
        """int64 [rows, m] the best columns of each row, best first; see row_top."""
        return row_top(ST, m)

    def segment_maxsum(self, ST: np.ndarray, codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """float32 [m] centroid interaction per segment; see segment_maxsum."""
        return segment_maxsum(ST, codes, counts)

    def scatter_max_rows(self, ST: np.ndarray, cents: np.ndarray, slots: np.ndarray, num_slots: int) -> np.ndarray:
        """float32 [num_slots, Lq]; see scatter_max_rows."""
        return scatter_max_rows(ST, cents, slots, num_slots)

    def maxsim(self, tables: Any, Q: np.ndarray, ST: np.ndarray, codes: np.ndarray, packed: np.ndarray,
               norms: np.ndarray, lens: np.ndarray, threads: int = 1) -> np.ndarray:
        """float32 [m] MaxSim of Q [Lq, dim] against documents of ``lens`` vectors; see maxsim."""
        centroids, weights, nbits = tables
        return maxsim(Q, centroids, codes, packed, norms, lens, weights, nbits)

    def doc_maxsum(self, ST: np.ndarray, doc_codes: np.ndarray, offsets: np.ndarray, pids: np.ndarray) -> np.ndarray:
        """float32 [len(pids)] centroid interaction of documents given by CSR code lists; see doc_maxsum. Here:
        the gather, then this backend's :meth:`segment_maxsum`."""
        rows, counts = doc_rows(offsets, pids)
        return self.segment_maxsum(ST, np.asarray(doc_codes)[rows], counts)

    def maxsim_docs(self, tables: Any, Q: np.ndarray, ST: np.ndarray, codes: np.ndarray, packed: np.ndarray,
                    norms: np.ndarray, offsets: np.ndarray, pids: np.ndarray, threads: int = 1) -> np.ndarray:
        """float32 [len(pids)] MaxSim of documents read from the index's rows by ``offsets``; see maxsim_docs.
        Here: the gather, then this backend's :meth:`maxsim`."""
        idx, lens = doc_rows(offsets, pids)
        return self.maxsim(tables, Q, ST, np.take(codes, idx), np.take(packed, idx, axis=0), np.take(norms, idx), lens,
                           threads)

    def warp_probes(self, ST: np.ndarray, ordered: np.ndarray, cell_sizes: np.ndarray, want: float, least: int,
                    most: int) -> tuple[np.ndarray, np.ndarray]:
        """(int64 [Lq] cells probed per token, float32 [Lq] their scores outside them); see warp_probes."""
        return warp_probes(ST, ordered, cell_sizes, want, least, most)

    def warp_scores(self, tables: Any, Q: np.ndarray, ST: np.ndarray, cells: np.ndarray, ncells: np.ndarray,
                    miss: np.ndarray, layout: Any, scratch: Any, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(pids int64 ascending, float32 estimates): WARP-style candidate estimates over a cell-ordered
        ``layout`` (embedctl.search.warp.WarpLayout); see warp_scores. ``scratch``: the native kernel's."""
        _, weights, nbits = tables
        return warp_scores(Q, ST, cells, ncells, miss, layout.cell_offsets, layout.packed_rows(), layout.norms,
                           layout.pids, layout.num_docs, weights, nbits)
