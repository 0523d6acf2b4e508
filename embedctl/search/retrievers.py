"""Retrievers behind one call: ``search(Q, k) -> [(pids int64 [<=k], scores float32 [<=k]), ...]`` per query.

Both open one generation of the index (embedctl.index.generations): every segment, tombstoned documents
never returned. ``DenseRetriever`` wraps the faiss index (one call per query batch); ``PlaidRetriever`` calls
``PlaidSearcher.search`` per query, the queries of a batch on a thread pool, with the search.* PLAID knobs (null = chosen per k by the searcher, per
call, never sticky). Hits that do not exist (faiss -1) are dropped: fewer hits, never invented ranks.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index import meta as M
from embedctl.index.dense import DENSE_FILE, DenseSearcher
from embedctl.index.dense_segments import DenseSegments
from embedctl.index.generations import Generation, open_generation
from embedctl.index.kinds import DenseKind, LexicalKind, PlaidKind, index_kind
from embedctl.search.plaid import PlaidSearcher, use_warp
from embedctl.util.threads import set_faiss_threads_of_this_thread


class DenseRetriever:
    def __init__(self, index: Generation | Path, search_cfg: Any, index_backend: dict[str, str] | None = None):
        if isinstance(index, Generation):
            self.searcher = DenseSegments(index)  # every segment, tombstones skipped
        elif (Path(index) / M.META_FILE).is_file():
            self.searcher = DenseSegments(open_generation(Path(index)))
        else:  # a bare dense.faiss folder (tests, tools)
            self.searcher = DenseSearcher(Path(index) / DENSE_FILE)
        self.nprobe, self.ef_search = search_cfg.nprobe, search_cfg.hnsw_ef_search
        if getattr(search_cfg, "threads", None):  # search.threads (torch's are set when the session opens)
            import faiss  # noqa: F401 - imported, so its count can be set

            # for the thread that opens the index (the CLI searches on it; a server's workers set their own)
            set_faiss_threads_of_this_thread(int(search_cfg.threads))
        self.index_backend = dict(index_backend or {})

    def backend_report(self) -> dict[str, Any]:
        return {"index": self.index_backend, "search": {"name": "faiss", "precision": "fp32"}}

    def search(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Q float32 [nq, dim] (one vector per query); ``allowed``: bool [rows], a filter's documents."""
        if allowed is not None:
            if not isinstance(self.searcher, DenseSegments):
                raise EmbedctlError("a filter needs an index folder (its fields), not a bare dense.faiss",
                                    hint="open the index folder (embedctl.Index.open(FOLDER)), or search without a filter")
            scores, pids = self.searcher.search(Q, k, nprobe=self.nprobe, ef_search=self.ef_search, allowed=allowed)
        else:
            scores, pids = self.searcher.search(Q, k, nprobe=self.nprobe, ef_search=self.ef_search)
        out = []
        for row_pids, row_scores in zip(pids, scores, strict=True):
            keep = row_pids >= 0
            out.append((row_pids[keep], row_scores[keep]))
        return out


# centroid scores of a block of queries computed at once: at most this many bytes (Lq x C floats a query)
BATCH_ST_BYTES = 64 << 20


class PlaidRetriever:
    def __init__(self, generation: Generation, search_cfg: Any, device: str = "cpu"):
        # WARP's in-memory copy of the vectors only where this session's searches can ask for it
        warp = not search_cfg.exhaustive and use_warp(str(search_cfg.candidates), search_cfg.centroid_score_threshold,
                                                      search_cfg.ndocs)
        self.searcher = PlaidSearcher(generation, device=device, precision=str(search_cfg.precision),
                                      backend=str(search_cfg.backend), warp_layout=warp,
                                      query_threads=self.query_threads(search_cfg))
        self.cfg = search_cfg
        self._pool: ThreadPoolExecutor | None = None

    def backend_report(self) -> dict[str, Any]:
        return self.searcher.backend_report()

    def search(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Q float32 [nq, Lq, dim] (token vectors per query); ``allowed``: bool [rows], a filter's documents
        (PLAID restricts its candidates to them: embedctl.search.plaid). Several queries run on a pool of
        threads (the kernels, numpy's gathers and torch's matmul release the GIL); each query's result is the
        one a call on its own gives (every stage is per query; tested). Queries searched one at a time split
        across search.query_threads; queries side by side take one thread each."""
        workers = min(len(Q), self.workers())
        if workers <= 1 or self.searcher.device != "cpu":
            return [self.search_one(q, k, allowed, threads=None) for q in Q]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers(), thread_name_prefix="plaid-search")
        out: list[tuple[np.ndarray, np.ndarray]] = []
        per_block = max(1, BATCH_ST_BYTES // max(1, Q.shape[1] * self.searcher.num_partitions * 4))
        for lo in range(0, len(Q), per_block):  # the centroid scores of a block of queries in one matmul (or none)
            block = Q[lo:lo + per_block]
            STs = None if self.cfg.exhaustive else self.searcher.batch_centroid_scores(block)
            out += self._pool.map(lambda i, block=block, STs=STs: self.search_one(
                block[i], k, allowed, None if STs is None else STs[i], threads=1), range(len(block)))
        return out

    def search_one(self, q: np.ndarray, k: int, allowed: np.ndarray | None = None,
                   centroid_scores: np.ndarray | None = None, threads: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """One query; ``threads``: the threads it splits across (None: search.query_threads)."""
        c = self.cfg
        pids, scores = self.searcher.search(q, k, ncells=c.ncells, centroid_score_threshold=c.centroid_score_threshold,
                                            ndocs=c.ndocs, exhaustive=c.exhaustive, allowed=allowed,
                                            centroid_scores=centroid_scores, candidates=c.candidates, threads=threads)
        return np.asarray(pids, dtype=np.int64), np.asarray(scores, dtype=np.float32)

    def workers(self) -> int:
        """Threads for a batch of queries: search.threads, else one per core this process may use."""
        threads = getattr(self.cfg, "threads", None)
        if threads:
            return int(threads)
        return _cores()

    @staticmethod
    def query_threads(search_cfg: Any) -> int:
        """Threads of one query searched alone: search.query_threads, else search.threads, else one per core."""
        return int(getattr(search_cfg, "query_threads", None) or getattr(search_cfg, "threads", None) or _cores())


def _cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class LexicalRetriever:
    """BM25 over a generation's lexical side (embedctl.index.lexical), every segment, tombstones skipped;
    searched with query texts (``search_texts``), not vectors. A document sharing no term with the query
    scores 0 and is never returned."""

    def __init__(self, generation: Generation):
        from embedctl.index.lexical import LexicalSegment, has_lexical

        if not has_lexical(generation):
            raise EmbedctlError(f"the index {generation.index_dir} has no lexical side (built with index.lexical=false, "
                                "or from a token cache)", exit_code=2,
                                hint="search it with search.mode=neural, or rebuild it from the text collection "
                                     "with index.lexical=true")
        self.generation = generation
        self.parts = []
        offset = 0
        for seg in generation.segments:
            rel = seg.rel("lexical")
            deleted = generation.deleted_rows(seg) if seg.deleted else None
            self.parts.append((LexicalSegment(generation.index_dir, rel, seg.rows), offset, deleted))
            offset += seg.rows
        self.rows = offset

    def backend_report(self) -> dict[str, Any]:
        return {"index": {"name": "bm25s", "precision": "fp32"}, "search": {"name": "bm25s", "precision": "fp32"}}

    def scores(self, text: str) -> np.ndarray:
        """float32 [rows]: every document's BM25 score (each segment's statistics), tombstoned rows -inf."""
        from embedctl.index.lexical import query_tokens

        tokens = query_tokens(text)
        out = np.empty(self.rows, np.float32)
        for part, offset, deleted in self.parts:
            s = part.scores(tokens)
            if deleted is not None:
                s = s.copy()
                s[deleted] = -np.inf
            out[offset:offset + part.rows] = s
        return out

    def search_texts(self, texts: list[str], k: int, allowed: np.ndarray | None = None
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for text in texts:
            scores = self.scores(text)
            if allowed is not None:
                scores = np.where(allowed, scores, -np.inf)
            hit = np.flatnonzero(scores > 0)
            if len(hit) > k:
                hit = hit[np.argpartition(-scores[hit], k - 1)[:k]]
            order = np.lexsort((hit, -scores[hit]))
            out.append((hit[order].astype(np.int64), scores[hit[order]].astype(np.float32)))
        return out


# one retriever per index kind (embedctl.index.kinds), by the kind's name
RETRIEVERS = {
    PlaidKind.name: lambda gen, search_cfg, device: PlaidRetriever(gen, search_cfg, device=device),
    DenseKind.name: lambda gen, search_cfg, device: DenseRetriever(gen, search_cfg, gen.meta.get("backend")),
    LexicalKind.name: lambda gen, search_cfg, device: LexicalRetriever(gen),  # texts, not vectors: search_texts
}


def open_retriever(index: Path | Generation, search_cfg: Any, device: str = "cpu"):
    """The retriever of one generation of an index (a folder: its newest generation); ``device``: where the
    encoder runs, used by the kinds that search on it."""
    generation = index if isinstance(index, Generation) else open_generation(index)
    kind = index_kind(generation.kind)
    return RETRIEVERS[kind.name](generation, search_cfg, device if kind.searches_on_encoder_device else "cpu")

