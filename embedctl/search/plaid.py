"""PLAID search over an embedctl PLAID index (format: docs/index-format.md).

Stages for one query Q [Lq, dim] (L2-normalised token vectors):
1. centroid scores S = Q @ centroids^T, [Lq, C], computed once per query and reused by every stage;
2. candidates: the unique pids in the IVF lists of the ``ncells`` best centroids of each query token;
3. pruned centroid interaction: sum_q max over a document's centroids c with max_q S[q, c] >=
   ``centroid_score_threshold`` of S[q, c] -> top ``ndocs`` (skipped when there are no more candidates);
4. full centroid interaction (every centroid of the document) -> top max(ndocs // 4, k);
5. exact MaxSim on the decompressed, normalised vectors -> top k. Q . (c + r) / ||c + r||: the centroid part
   from S, the norm stored in the index, and Q . r either summed straight from the packed residual bytes
   through a per-query table lut[byte position, byte value, q] (fp32 with the C kernels: no decoded
   vectors, nbytes * Lq additions per vector instead of dim * Lq multiply-adds) or by decoding the
   residuals (a byte -> values table gather) and one matmul.
By default (``search.candidates`` auto) stages 2-4 are replaced by WARP-style candidate generation
(embedctl/search/warp.py): each query token scores the vectors of its own best cells straight from their
packed bytes, per-document estimates pick stage 5's pool of max(2k, 40). ``plaid`` keeps the stages above,
and auto falls back to them when a key only they read (centroid_score_threshold, ndocs) is given.
The PLAID budget (cells per query token, stage-3 threshold, ndocs) is chosen per call from the index and the
query (embedctl/search/plaid_budget.py: cells by cumulative cluster size, the threshold lowered to the
weakest token's best centroid, ndocs raised to a share of a small index); explicit values win, one by one,
and never stick between calls. Stanford ColBERT's fixed table by k stays reachable by giving its values.

The arithmetic of stages 3-5 is the backend's (embedctl/index/plaid/backends.py): the reference (numpy/torch)
or the native C kernels, whose ``precision`` is the stage-5 MaxSim's (and exhaustive search's): ``fp32``,
``fp16`` (its table rounded to float16: ~1e-5 on a token similarity; the default on AVX-512 CPUs), or ``bf16``
on CPUs with bfloat16 matrix units (a token similarity moves by at most ~1e-3). The candidate logic here is
the same whatever the backend.

A filter (``allowed``: bool [num_docs], embedctl.search.filter_eval) pre-filters, with a cost model: the
allowed documents are all scored exactly (search_exhaustive over them: the exact filtered top k) when they
are at most an unfiltered search's stage-5 pool or their vectors at most FILTER_EXACT_FACTOR times its
vectors (stage 5 dominates the candidate path's time); otherwise (a filter that passes many documents) every
allowed document is a candidate: ranked by full centroid interaction (stage 4), scored exactly from the best
down, the pool first, then more while one could still reach the top k (:meth:`PlaidSearcher.rank_allowed`).
PLAID's own candidate generation (stage 2, cells widened by 1 / selectivity) is not used there: on minilm as
an untrained ColBERT over 5,183 SciFact documents it left one of the exact filtered top 10 out of its
candidates for 7 of the first 40 test queries at 50%. With explicit search.ncells / ndocs /
centroid_score_threshold a filter takes that path (the budget widened by 1 / selectivity, at most 8x; only
allowed documents are ever candidates), and when fewer than k remain (stage 2 or after pruning) every allowed
document is scored exactly. Either way k hits come back whenever k documents pass.

An index with several segments or deletes (embedctl.index.generations) is searched as one: pids run over
the segments in order, tombstoned documents are left out of the IVF at load (so they are never candidates)
and skipped by exhaustive search.

Precomputed at load: float32 centroids, per-document vector offsets, per-document unique centroid lists
(the IVF transposed, CSR), the backend's tables, and WARP's cell-ordered copy of the packed residuals (in
memory: about the index's residual bytes again). The index's own vector arrays stay memory-mapped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index import plaid_files as fmt
from embedctl.index.generations import Generation
from embedctl.index.plaid.backends import search_backend
from embedctl.index.plaid.ivf import ranges_index
from embedctl.index.plaid.reference import Backend
from embedctl.search import warp
from embedctl.search.plaid_budget import Budget, adaptive_ndocs, choose_budget, probe_limit, table_params
from embedctl.util.sorting import stable_argsort

default_params = table_params  # the old name (Stanford ColBERT's table by k)
FILTER_MAX_SCALE = 8  # a filter widens the candidate budget by 1 / selectivity, at most this much
FILTER_EXACT_FACTOR = 2.0  # exact MaxSim over a filter's documents up to this many times stage 5's vectors
# the filtered candidate path scores a document exactly while its centroid interaction plus the largest gap
# (exact - interaction) seen so far plus this many standard deviations of the gaps reaches the k-th score.
# Simulated on minilm as an untrained ColBERT, 5,183 SciFact documents, 10/25/50% filters: 0 gave 50 of the
# first 60 test queries the exact top 10 at 50%; 1 gave all 300 test queries and 200 held-out train queries
# the exact top 10; 1.5 (a margin) scores ~1.5x the documents that 1 does.
FILTER_GAP_STDS = 1.5


class PlaidSearcher:
    """Memory-maps a PLAID index and answers top-k queries.

    >>> s = PlaidSearcher("indexes/scifact")                # doctest: +SKIP
    >>> pids, scores = s.search(Q, k=10)                     # Q: float32 [Lq, dim]  # doctest: +SKIP
    """

    def __init__(self, index_dir: str | Path | Generation, *, device: str = "cpu", precision: str = "auto",
                 backend: str | Backend = "auto", warp_layout: bool = True, query_threads: int = 1):
        """``warp_layout``: build WARP's cell-ordered copy of the vectors now (the default candidates need it);
        False leaves it until a search first asks for WARP's candidates (a session whose search.candidates
        is plaid never holds it: about the residual bytes again in memory). ``query_threads``: the threads one
        search splits across by default (search.query_threads; :meth:`search`'s ``threads``)."""
        self.device = device
        self.backend = backend if isinstance(backend, Backend) else search_backend(device, precision, backend)
        self.precision = self.backend.precision
        # one generation (embedctl.index.generations): a later add/delete/compact never changes what this reads
        arrays = fmt.open_plaid(index_dir if isinstance(index_dir, Generation) else Path(index_dir))
        self.index_dir = arrays.index_dir
        self.index_backend: dict[str, str] = dict(arrays.meta.get("backend") or {})  # what built the index
        meta = arrays.plaid
        self.meta = meta
        self.num_docs, self.dim, self.nbits = int(meta["num_docs"]), int(meta["dim"]), int(meta["nbits"])
        self.centroids = np.ascontiguousarray(arrays.centroids, dtype=np.float32)
        self.num_partitions = self.centroids.shape[0]
        self.bucket_weights = arrays.bucket_weights
        self.tables = self.backend.search_tables(self.centroids, self.bucket_weights, self.nbits)
        self.codes, self.residuals, self.norms = arrays.codes, arrays.residuals, arrays.norms
        self.doclens = arrays.doclens
        # tombstoned documents: left out of the IVF at load (never candidates) and skipped by exhaustive search
        self.deleted = arrays.deleted
        self.generation = arrays.generation
        self.doc_offsets = np.concatenate([[0], np.cumsum(self.doclens)]).astype(np.int64)
        self.chunk_emb_starts = arrays.chunk_emb_starts
        self.ivf = np.asarray(arrays.ivf, dtype=np.int64)
        self.ivf_lengths = np.asarray(arrays.ivf_lengths, dtype=np.int64)
        self.ivf_offsets = np.concatenate([[0], np.cumsum(self.ivf_lengths)]).astype(np.int64)
        self._build_doc_codes()
        self._warp: warp.WarpLayout | None = None
        self._warp_lock = threading.Lock()
        if warp_layout:
            self._warp = self._build_warp()
        self._last_params: dict[str, Any] | Callable[[], dict[str, Any]] = {}
        self._scratch = threading.local()  # per thread: queries of one batch run on several threads
        self.query_threads = max(1, int(query_threads))

    def _build_doc_codes(self) -> None:
        """Per-document sorted unique centroid ids (CSR), from the IVF: the stage-3/4 centroid lists."""
        ivf_codes = np.repeat(np.arange(self.num_partitions, dtype=np.int32), self.ivf_lengths)
        order = stable_argsort(self.ivf)
        self.doc_codes = ivf_codes[order]
        counts = np.bincount(self.ivf, minlength=self.num_docs).astype(np.int64)
        self.doc_code_counts = counts
        self.doc_code_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def _build_warp(self) -> warp.WarpLayout:
        return warp.WarpLayout.build(self.codes, self.residuals, self.norms, self.doclens, self.num_partitions,
                                     self.deleted)

    @property
    def warp(self) -> warp.WarpLayout:
        """WARP's cell-ordered copy of the live vectors (embedctl/search/warp.py), built on first use when the
        searcher was opened without it (once, whichever thread asks first)."""
        if self._warp is None:
            with self._warp_lock:
                if self._warp is None:
                    self._warp = self._build_warp()
        return self._warp

    def backend_report(self) -> dict[str, Any]:
        """The backend that built the index and the one searching it; a note when they differ (allowed: the
        search arithmetic is checked against the reference whatever built the index)."""
        search = self.backend.describe()
        report: dict[str, Any] = {"index": self.index_backend, "search": search}
        if self.index_backend and self.index_backend.get("name") != search["name"]:
            report["note"] = (f"the index was built by the {self.index_backend.get('name')} backend and is searched "
                              f"by the {search['name']} backend")
        return report

    @property
    def last_params(self) -> dict[str, Any]:
        """What the last search chose (cells, pool, filter path...), for reports only; a WARP search leaves the
        makings of its report, built here on first read (a dozen Python operations a query that nobody reads
        in a serving loop: ~15 us of a search's p50 on one core, its data evicted by the kernels between)."""
        if callable(self._last_params):
            self._last_params = self._last_params()
        return self._last_params

    @last_params.setter
    def last_params(self, value: dict[str, Any]) -> None:
        self._last_params = value

    # -- public API ---------------------------------------------------------------------------------
    def search(self, Q: Any, k: int, *, ncells: int | None = None, centroid_score_threshold: float | None = None,
               ndocs: int | None = None, exhaustive: bool = False, allowed: np.ndarray | None = None,
               centroid_scores: np.ndarray | None = None, candidates: str = "auto", threads: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (pids int64 [<= k], scores float32 [<= k]) for one query Q [Lq, dim], best first.

        Fewer than k rows come back when fewer documents are reachable; parameters left None are
        picked from k for this call only. ``centroid_scores``: this query's ST when the caller computed it
        (:meth:`batch_centroid_scores`; the same values, one matmul for several queries). ``candidates``:
        ``warp`` (embedctl/search/warp.py), ``plaid`` (stages 2-4 below) or ``auto`` (warp unless
        ``centroid_score_threshold`` or ``ndocs`` is given, which only PLAID's stages read); a filter takes its
        own path either way. ``threads``: the threads this search's centroid scores, cell selection (but from the AMX
        kernel's block maxima), WARP scan and exact MaxSim split across (the native backend; the same results whatever the count), default
        ``query_threads``.
        """
        Q = self.as_query(Q)
        self._scratch.threads = self.query_threads if threads is None else max(1, int(threads))
        if k < 1:
            raise EmbedctlError(f"k = {k}: must be >= 1", hint="ask for at least one hit")
        if exhaustive:
            return self.search_exhaustive(Q, k, allowed=allowed)
        live = self.live_docs()
        passing = live if allowed is None else int(np.count_nonzero(allowed))
        # a filter widens the budget by its inverse selectivity (at most 8x), so that about as many allowed
        # candidates come out as an unfiltered search has candidates
        scale = 1 if allowed is None else min(FILTER_MAX_SCALE, -(-live // max(1, passing)))
        if allowed is not None:  # decided before any centroid score: the exact path needs none of them
            adaptive = ncells is None and ndocs is None and centroid_score_threshold is None
            # the documents stage 5 scores exactly: an unfiltered search's pool (adaptive), or the widened
            # budget's (explicit keys: the stage-2 candidates of the widened cells)
            base = adaptive_ndocs(k, live) if ndocs is None else max(1, int(ndocs))
            pool = max(base // 4 if adaptive or ndocs is not None else base * scale // 4, k)
            if self.exact_is_cheaper(allowed, passing, pool, k):
                self.last_params = {"filter_path": "exact", "pool": pool}
                return self.search_exhaustive(Q, k, allowed=allowed)
            if adaptive:
                self.last_params = {"filter_path": "candidates", "pool": pool}
                ST = self.centroid_scores(Q) if centroid_scores is None else centroid_scores
                return self.rank_allowed(Q, ST, allowed, pool, k)
        # this search's own scores: written into the thread's buffer (a fresh 2 MiB array per query cost its
        # page faults), which the next search on this thread rewrites
        ST = self.backend.centroid_scores(self.centroids, Q, self._scratch, self._threads(), self.tables) \
            if centroid_scores is None else centroid_scores
        if allowed is None and use_warp(candidates, centroid_score_threshold, ndocs):
            return self.search_warp(Q, ST, k, ncells)
        # each token's best cells, best first, once: the budget's cumulative sizes and stage 2 read them
        most = probe_limit(self.num_partitions, scale) if ncells is None else \
            max(1, min(int(ncells) * scale, self.num_partitions))
        ordered = self.backend.row_top(ST, most, self._threads()) if most < self.num_partitions else None
        budget = choose_budget(ST, k, self.ivf_lengths, live, ncells=ncells, threshold=centroid_score_threshold,
                               ndocs=ndocs, scale=scale, ordered=ordered)
        self.last_params = budget.report()  # for reports only
        cand = self.candidates(ST, budget.cells, ordered)
        if allowed is not None:  # pre-filtering: only allowed documents are ever candidates
            self.last_params["filter_path"] = "candidates"
            cand = cand[allowed[cand]]
        if len(cand) < k and passing > len(cand):
            # the probed cells hold fewer than k (allowed) documents: score every (allowed) document exactly,
            # so k hits come back whenever k documents are there
            return self.search_exhaustive(Q, k, allowed=allowed)
        pids, scores = self.rank_candidates(Q, ST, cand, budget, k)
        if len(pids) < k and passing > len(pids):  # pruned below k (search.ndocs < k)
            return self.search_exhaustive(Q, k, allowed=allowed)
        return pids, scores

    def search_warp(self, Q: np.ndarray, ST: np.ndarray, k: int, ncells: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """WARP-style candidates (embedctl/search/warp.py): each token's cells, every vector there scored for that
        token, per-document estimates, the best :func:`warp_pool` of them scored exactly (stage 5)."""
        ordered = self.backend.row_top(ST, warp.cells_to_select(k, ncells, self.num_partitions), self._threads())
        cells, miss = self.backend.warp_probes(ST, ordered, self.warp.cell_sizes,
                                               *warp.probe_limits(ordered.shape[1], self.warp, k, ncells))
        pids, estimates = self.backend.warp_scores(self.tables, Q, ST, ordered, cells, miss, self.warp,
                                                   self.warp.scratch(self._scratch), self._threads())
        pool = warp.warp_pool(k)
        self._last_params = partial(warp_report, cells, len(pids), pool)
        if len(pids) < k and self.live_docs() > len(pids):  # fewer than k documents in the probed cells
            return self.search_exhaustive(Q, k)
        return self.rank(Q, ST, top_candidates(pids, estimates, pool, self.backend), k)

    def rank_candidates(self, Q: np.ndarray, ST: np.ndarray, cand: np.ndarray, budget: Budget, k: int
                        ) -> tuple[np.ndarray, np.ndarray]:
        """Stages 3-5 on the candidates: pruned centroid interaction -> top ndocs, full centroid interaction
        -> top max(ndocs // 4, k), exact MaxSim -> top k."""
        if len(cand) > budget.ndocs:
            cand = top_candidates(cand, self.pruned_scores(ST, cand, budget.threshold), budget.ndocs, self.backend)
        keep = max(budget.ndocs // 4, k)
        if len(cand) > keep:
            cand = top_candidates(cand, self.centroid_interaction(ST, cand), keep, self.backend)
        return self.rank(Q, ST, cand, k)

    def rank_allowed(self, Q: np.ndarray, ST: np.ndarray, allowed: np.ndarray, pool: int, k: int
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The filtered candidate path: every allowed live document ranked by full centroid interaction (stage
        4; ~1/7 of exact MaxSim's cost a document), the best ``pool`` scored exactly (stage 5), then more in
        that order, in growing blocks, while one could still reach the top k: a document whose interaction
        plus the largest gap (exact - interaction) seen among the scored ones, plus FILTER_GAP_STDS standard
        deviations of those gaps, reaches the k-th exact score so far. Not a bound (a document further down
        may gain more from its residuals than any scored one); measured against exhaustive filtered MaxSim
        (bench/bench_filters.py)."""
        pids = np.flatnonzero(allowed & (self.doclens > 0))
        if self.deleted is not None:
            pids = pids[~self.deleted[pids]]
        ci = self.centroid_interaction(ST, pids)
        order = np.argsort(-ci, kind="stable")
        pids, ci = pids[order], ci[order]
        exact = np.empty(len(pids), dtype=np.float32)
        done, step = 0, min(len(pids), max(pool, k))
        while step > 0:
            part = np.argsort(pids[done:done + step], kind="stable")
            block = pids[done:done + step][part]
            exact[done + part] = self._maxsim(Q, block, ST)
            done += step
            if done >= len(pids):
                break
            kth = np.partition(exact[:done], done - k)[done - k] if done >= k else -np.inf
            gaps = exact[:done] - ci[:done]
            gap = float(gaps.max() + FILTER_GAP_STDS * gaps.std())
            # ci is sorted best first: the documents that could still reach kth are a prefix of the rest
            reach = int(np.searchsorted(-ci[done:], -(kth - gap), side="right"))
            step = min(reach, max(done, pool))
        self.last_params["filter_exact_docs"] = done
        top = top_candidates(np.arange(done), exact[:done], k, self.backend)
        return self._sorted(pids[top], exact[top])

    def live_docs(self) -> int:
        return self.num_docs - (int(self.deleted.sum()) if self.deleted is not None else 0)

    def exact_is_cheaper(self, allowed: np.ndarray, passing: int, pool: int, k: int) -> bool:
        """The filter's cost model: exact MaxSim over the allowed documents when their vectors are at most
        FILTER_EXACT_FACTOR times the vectors of the ``pool`` documents the candidate path scores exactly in
        stage 5 (the stage that dominates its time: stage 4 reads a document's unique centroids, stage 5
        every vector's bytes)."""
        if passing <= max(k, pool):
            return True
        pool_vectors = pool * float(self.doclens.mean() if len(self.doclens) else 0)
        return float(self.doclens[allowed].sum()) <= FILTER_EXACT_FACTOR * pool_vectors

    def search_exhaustive(self, Q: Any, k: int, block_vectors: int = 1 << 16, allowed: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Exact MaxSim against every document's decompressed vectors (the quality reference); ``allowed``
        (bool [num_docs], a filter's documents): against those only."""
        Q = self.as_query(Q)
        scores = np.full(self.num_docs, -np.inf, dtype=np.float32)
        ST = self.centroid_scores(Q)
        if allowed is not None:  # only the allowed documents, in blocks of their own vectors (few calls)
            pids = np.flatnonzero(allowed & (self.doclens > 0))
            if self.deleted is not None:
                pids = pids[~self.deleted[pids]]
            ends = np.cumsum(self.doclens[pids])
            lo = 0
            while lo < len(pids):
                hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + block_vectors, side="right")))
                scores[pids[lo:hi]] = self._maxsim(Q, pids[lo:hi], ST)
                lo = hi
            valid = np.flatnonzero(np.isfinite(scores))
            top = top_candidates(valid, scores[valid], k, self.backend)
            return self._sorted(top, scores[top])
        starts = self.doc_offsets[:-1]
        lo = 0
        while lo < self.num_docs:
            hi = int(np.searchsorted(starts, starts[lo] + block_vectors, side="right"))
            hi = max(hi, lo + 1)
            pids = np.arange(lo, min(hi, self.num_docs))
            pids = pids[self.doclens[pids] > 0]
            if self.deleted is not None:
                pids = pids[~self.deleted[pids]]
            if len(pids):
                scores[pids] = self._maxsim(Q, pids, ST)
            lo = hi
        valid = np.flatnonzero(np.isfinite(scores))
        top = top_candidates(valid, scores[valid], k, self.backend)
        return self._sorted(top, scores[top])

    # -- stages -------------------------------------------------------------------------------------
    def centroid_scores(self, Q: np.ndarray) -> np.ndarray:
        """ST = Q @ centroids^T, float32 [Lq, C], held as the transpose of a C-contiguous [C, Lq] (the backend's
        arithmetic): the kernels read a centroid's Lq scores together (its row there), the cell selection reads
        it whole (embedctl_col_top), and no transposed copy is made (numpy's reductions over a token's row work
        on the view)."""
        return self.backend.centroid_scores(self.centroids, Q, tables=self.tables)

    def batch_centroid_scores(self, Q: np.ndarray) -> np.ndarray | None:
        """ST of several queries at once, float32 [nq, Lq, C] from Q [nq, Lq, dim] (each held as
        :meth:`centroid_scores` holds it), where the backend computes a batch faster than query by query (one
        matmul on every core); None where it does not (the native kernel: each search computes its own, on
        its own thread). Every query's ST equals :meth:`centroid_scores` of it alone (checked in the tests)."""
        return self.backend.batch_centroid_scores(self.centroids, np.ascontiguousarray(Q, dtype=np.float32))

    def candidates(self, ST: np.ndarray, ncells: int | np.ndarray, ordered: np.ndarray | None = None) -> np.ndarray:
        """Sorted unique pids of the IVF lists of each query token's ``ncells`` best centroids (one count for
        every token, or int [Lq]: a count per token). ``ordered``: each token's best centroids, best first
        (the backend's row_top), when the caller has at least ``max(ncells)`` of them."""
        counts = np.minimum(np.broadcast_to(np.asarray(ncells, dtype=np.int64), (ST.shape[0],)), self.num_partitions)
        most = int(counts.max())
        if ordered is not None and ordered.shape[1] >= most and most < self.num_partitions:
            top = ordered[:, :most]
            cells = top.ravel() if counts.min() == most else top[np.arange(most)[None, :] < counts[:, None]]
        elif most == 1:
            cells = ST.argmax(axis=1)
        elif most >= self.num_partitions and counts.min() == most:
            cells = np.arange(self.num_partitions)
        else:
            top = np.argpartition(-ST, most - 1, axis=1)[:, :most] if most < self.num_partitions else \
                np.broadcast_to(np.arange(self.num_partitions), ST.shape)
            if counts.min() < most:  # tokens taking fewer cells: their best ones, in score order
                order = np.argsort(-np.take_along_axis(ST, top, axis=1), axis=1, kind="stable")
                top = np.take_along_axis(top, order, axis=1)
                top = top[np.arange(most)[None, :] < counts[:, None]]
            cells = top.ravel()
        cells = np.flatnonzero(np.bincount(cells, minlength=self.num_partitions))  # sorted unique, no numpy.ma import
        idx = ranges_index(self.ivf_offsets[cells], self.ivf_lengths[cells])
        pids = self.ivf[idx]
        if len(pids) * 64 < self.num_docs:  # few hits: sorting them is cheaper than a pass over every pid
            pids = np.sort(pids)
            return pids[np.concatenate(([True], pids[1:] != pids[:-1]))] if len(pids) else pids
        seen = np.zeros(self.num_docs, dtype=bool)
        seen[pids] = True
        return np.flatnonzero(seen)

    def pruned_scores(self, ST: np.ndarray, cand: np.ndarray, threshold: float, via: str | None = None) -> np.ndarray:
        """sum_q max over the candidate's centroids c with max_q S[q, c] >= threshold of S[q, c]; -inf when none.

        Walks whichever side is smaller: the IVF lists of the passing centroids, or the centroid lists of
        the candidates (same result); ``via`` = "ivf" | "docs" forces one (tests).
        """
        passing = np.flatnonzero(ST.max(axis=0) >= threshold)
        via_ivf = int(self.ivf_lengths[passing].sum())
        counts = self.doc_code_counts[cand]
        if via == "ivf" or (via is None and via_ivf < int(counts.sum())):
            return self._pruned_via_ivf(ST, cand, passing)
        codes = self.doc_codes[ranges_index(self.doc_code_offsets[cand], counts)]
        keep = np.zeros(self.num_partitions, dtype=bool)
        keep[passing] = True
        keep = keep[codes]
        seg = np.repeat(np.arange(len(cand)), counts)[keep]
        return self.backend.segment_maxsum(ST, codes[keep], np.bincount(seg, minlength=len(cand)))

    def _pruned_via_ivf(self, ST: np.ndarray, cand: np.ndarray, passing: np.ndarray) -> np.ndarray:
        lengths = self.ivf_lengths[passing]
        pids = self.ivf[ranges_index(self.ivf_offsets[passing], lengths)]
        local = getattr(self._scratch, "slots", None)  # pid -> candidate slot, all -1 between calls
        if local is None:
            local = self._scratch.slots = np.full(self.num_docs, -1, dtype=np.int64)
        local[cand] = np.arange(len(cand), dtype=local.dtype)
        slots = local[pids]  # -1 for pids that are not candidates: skipped
        local[cand] = -1  # leave the scratch map clean for the next query
        return self.backend.scatter_max_rows(ST, np.repeat(passing, lengths), slots, len(cand)).sum(axis=1)

    def centroid_interaction(self, ST: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """sum_q max over all of each candidate's centroids of S[q, c] (float32 [len(cand)])."""
        return self.backend.doc_maxsum(ST, self.doc_codes, self.doc_code_offsets, cand)

    def rank(self, Q: np.ndarray, ST: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact MaxSim on decompressed vectors for the final candidates -> the top k, best first, a tie to the
        smaller pid (within the k and at its boundary alike)."""
        cand = np.sort(cand)
        cand = cand[self.doclens[cand] > 0]
        if len(cand) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        scores = self._maxsim(Q, cand, ST)
        order = np.lexsort((cand, -scores))[:k]  # one sort of the pool (a partition, then a sort of k: slower)
        return cand[order].astype(np.int64, copy=False), scores[order].astype(np.float32, copy=False)

    def _maxsim(self, Q: np.ndarray, pids: np.ndarray, ST: np.ndarray | None = None) -> np.ndarray:
        """MaxSim of Q against sorted pids with doclen > 0 on their decompressed, normalised vectors (the
        backend's arithmetic: Q . (c + r) / ||c + r|| with the centroid part from ST and the stored norms)."""
        if ST is None:
            ST = self.centroid_scores(Q)
        if len(self.codes) == 1:  # one chunk: the backend reads the rows in place
            return self.backend.maxsim_docs(self.tables, Q, ST, self.codes[0], self.residuals[0], self.norms[0],
                                            self.doc_offsets, pids, self._threads())
        lens = self.doclens[pids]
        codes, packed, norms = self._gather(ranges_index(self.doc_offsets[pids], lens))
        return self.backend.maxsim(self.tables, Q, ST, codes, packed, norms, lens, self._threads())

    def _gather(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """codes, packed residuals and norms for sorted global vector indices, across chunk files."""
        if len(self.codes) == 1:  # np.take: ~3x faster than fancy indexing on a memmap
            return np.take(self.codes[0], idx), np.take(self.residuals[0], idx, axis=0), np.take(self.norms[0], idx)
        bounds = np.searchsorted(idx, self.chunk_emb_starts)
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for i in range(len(self.codes)):
            lo, hi = bounds[i], bounds[i + 1]
            if hi > lo:
                local = idx[lo:hi] - self.chunk_emb_starts[i]
                parts.append((np.take(self.codes[i], local), np.take(self.residuals[i], local, axis=0),
                              np.take(self.norms[i], local)))
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]

    # -- helpers ------------------------------------------------------------------------------------
    def _threads(self) -> int:
        """The threads of this thread's search (set by :meth:`search`; 1 before the first)."""
        return getattr(self._scratch, "threads", 1)

    def as_query(self, Q: Any) -> np.ndarray:
        """Query vectors as float32 [Lq, dim] (a torch tensor or [1, Lq, dim] accepted); wrong shapes refused."""
        if hasattr(Q, "detach"):
            Q = Q.detach().cpu().numpy()
        Q = np.asarray(Q, dtype=np.float32)
        if Q.ndim == 3 and Q.shape[0] == 1:
            Q = Q[0]
        if Q.ndim != 2 or Q.shape[1] != self.dim or Q.shape[0] == 0:
            raise EmbedctlError(f"query vectors have shape {tuple(Q.shape)}; this index needs [Lq, {self.dim}]",
                                hint="encode the query with the model the index was built with")
        return np.array(Q, dtype=np.float32, order="C", copy=True)  # this search's own (the backend caches by it)

    @staticmethod
    def _sorted(pids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.lexsort((pids, -scores))  # best score first, ties by smaller pid
        return pids[order].astype(np.int64), scores[order].astype(np.float32)


def warp_report(cells: np.ndarray, estimated: int, pool: int) -> dict[str, Any]:
    """A WARP search's report (PlaidSearcher.last_params): the cells its tokens probed, the documents it
    estimated, its pool."""
    probed = cells.tolist()  # a few tokens: Python's min / max / sum beat numpy's reductions' call costs
    return {"candidates": "warp", "ncells": {"min": min(probed), "mean": round(sum(probed) / len(probed), 2),
                                             "max": max(probed)}, "estimated": estimated, "pool": pool}


def use_warp(candidates: str, threshold: float | None, ndocs: int | None) -> bool:
    """``search.candidates``: warp, plaid, or auto (warp unless a key that only PLAID's stages read is given)."""
    if candidates == "auto":
        return threshold is None and ndocs is None
    if candidates not in ("warp", "plaid"):
        raise EmbedctlError(f"candidates = {candidates!r}: expected auto, warp or plaid",
                            hint="set search.candidates=auto (or warp / plaid)")
    return candidates == "warp"


def top_candidates(ids: np.ndarray, scores: np.ndarray, n: int, backend: Backend | None = None) -> np.ndarray:
    """The ids of the n best scores (all when n >= len), in their order in ``ids``, a tie at the n-th best score
    to the earlier ones: the pruning step between stages (the backend's top_positions; the reference's when
    None)."""
    if n >= len(ids):
        return ids
    return ids[(backend or Backend()).top_positions(scores, n)]
