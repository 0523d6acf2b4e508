"""Retrievers behind one call: ``search(Q, k) -> [(pids int64 [<=k], scores float32 [<=k]), ...]`` per query.

``DenseRetriever`` wraps the faiss index (one call per query batch); ``PlaidRetriever`` calls
``PlaidSearcher.search`` per query with the search.* PLAID knobs (null = chosen per k by the searcher, per
call, never sticky). Hits that do not exist (faiss -1) are dropped: fewer hits, never invented ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embedctl.index.dense import DENSE_FILE, DenseSearcher
from embedctl.search.plaid import PlaidSearcher


class DenseRetriever:
    def __init__(self, index_dir: Path, search_cfg: Any, index_backend: dict[str, str] | None = None):
        self.searcher = DenseSearcher(index_dir / DENSE_FILE)
        self.nprobe, self.ef_search = search_cfg.nprobe, search_cfg.hnsw_ef_search
        self.index_backend = dict(index_backend or {})

    def backend_report(self) -> dict[str, Any]:
        return {"index": self.index_backend, "search": {"name": "faiss", "precision": "fp32"}}

    def search(self, Q: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Q float32 [nq, dim] (one vector per query)."""
        scores, pids = self.searcher.search(Q, k, nprobe=self.nprobe, ef_search=self.ef_search)
        out = []
        for row_pids, row_scores in zip(pids, scores, strict=True):
            keep = row_pids >= 0
            out.append((row_pids[keep], row_scores[keep]))
        return out


class PlaidRetriever:
    def __init__(self, index_dir: Path, search_cfg: Any, device: str = "cpu"):
        self.searcher = PlaidSearcher(index_dir, device=device,
                                      precision=str(search_cfg.precision), backend=str(search_cfg.backend))
        self.cfg = search_cfg

    def backend_report(self) -> dict[str, Any]:
        return self.searcher.backend_report()

    def search(self, Q: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Q float32 [nq, Lq, dim] (token vectors per query)."""
        c = self.cfg
        out = []
        for q in Q:
            pids, scores = self.searcher.search(q, k, ncells=c.ncells, centroid_score_threshold=c.centroid_score_threshold,
                                                ndocs=c.ndocs, exhaustive=c.exhaustive)
            out.append((np.asarray(pids, dtype=np.int64), np.asarray(scores, dtype=np.float32)))
        return out


def open_retriever(index_dir: Path, meta: dict[str, Any], search_cfg: Any, device: str = "cpu"):
    if meta["kind"] == "dense":
        return DenseRetriever(index_dir, search_cfg, meta.get("backend"))
    return PlaidRetriever(index_dir, search_cfg, device=device)
