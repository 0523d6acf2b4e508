"""Dense indexes that change: one faiss file per segment, searched together, tombstones skipped.

A segment added by ``embedctl index add`` gets its own ``dense.faiss`` of the index's type: ``flat`` an exact
inner-product index; ``ivf`` an empty copy of the build's trained IVF (same coarse centroids, so the new
vectors go to the lists a full build would have put them in: nothing is retrained) filled with the new
vectors; ``hnsw`` a new graph of the new vectors (the build's M and efConstruction). Search asks every
segment for ``k`` plus its tombstoned count (so deletes never shorten a ranking that has enough live
documents), drops tombstoned rows and merges by score (ties: the smaller pid). Compaction reads the
stored vectors back (``reconstruct``: the flat and HNSW storage and IVF lists keep them exactly) and
writes one index of live vectors, without encoding anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index.dense import DenseSearcher
from embedctl.index.generations import DENSE_FILE, Generation, Segment
from embedctl.util import atomic


def trained_ivf_source(gen: Generation) -> Path:
    """The faiss file whose trained IVF quantizer every new IVF segment copies (the first segment's)."""
    return gen.path(gen.segments[0].rel(DENSE_FILE))


def new_dense_index(gen: Generation, dim: int):
    """An empty faiss index of the index's dense type, ready to ``add`` vectors (IVF: already trained)."""
    import faiss

    params = gen.segments[0].dense or {}
    kind = params.get("type", "flat")
    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, int(params.get("hnsw_m", 32)), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(params.get("hnsw_ef_construction", 200))
        return index
    if kind == "ivf":
        index = faiss.read_index(str(trained_ivf_source(gen)))
        index.reset()  # keeps the trained coarse centroids, drops the vectors
        return index
    raise EmbedctlError(f"unknown dense index type {kind!r} in {gen.index_dir}")


def write_dense_segment(gen: Generation, seg_dir: str, vectors: np.ndarray) -> tuple[dict[str, Any], str]:
    """Write ``<seg_dir>/dense.faiss`` holding ``vectors`` (float32 [n, dim]); returns (description, file)."""
    import faiss

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    index = new_dense_index(gen, vectors.shape[1])
    if len(vectors):
        index.add(vectors)
    rel = f"{seg_dir}/{DENSE_FILE}"
    with atomic.atomic_path(gen.path(rel)) as tmp:
        faiss.write_index(index, str(tmp))
    params = {k: v for k, v in (gen.segments[0].dense or {}).items() if k not in ("encode_s", "faiss_s")}
    return {**params, "num_vectors": int(index.ntotal)}, rel


def reconstruct(path: Path) -> np.ndarray:
    """Every stored vector of a faiss file, in id order (float32 [ntotal, d])."""
    import faiss

    index = faiss.read_index(str(path))
    n = int(index.ntotal)
    if n == 0:
        return np.zeros((0, index.d), np.float32)
    if hasattr(index, "make_direct_map"):  # IVF: the lists hold the vectors; a direct map finds them by id
        index.make_direct_map()
    return index.reconstruct_n(0, n)  # flat and HNSW (its flat storage) reconstruct directly


class DenseSegments:
    """Searches a generation's dense segments as one index (pids run over the segments in order)."""

    def __init__(self, gen: Generation, use_gpu: bool | None = None):
        self.gen = gen
        self.parts: list[tuple[DenseSearcher, int, np.ndarray | None]] = []
        offset = 0
        for seg in gen.segments:
            path = gen.path(seg.rel(DENSE_FILE))
            _check_size(gen, seg, path)
            deleted = None
            if seg.deleted:
                deleted = np.zeros(seg.rows, dtype=bool)
                deleted[gen.deleted_rows(seg)] = True
            self.parts.append((DenseSearcher(path, use_gpu=use_gpu), offset, deleted))
            offset += seg.rows
        self.dim = self.parts[0][0].dim if self.parts else 0

    def search(self, queries: np.ndarray, k: int, *, nprobe: int | None = None, ef_search: int | None = None,
               allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Same contract as DenseSearcher.search (pids over the whole generation, -1 = no hit); ``allowed``
        (bool [rows], a filter's documents, tombstones already off): each segment searches its allowed rows
        only through a faiss id selector (DenseSearcher.search_allowed)."""
        if allowed is None and len(self.parts) == 1 and self.parts[0][2] is None:
            return self.parts[0][0].search(queries, k, nprobe=nprobe, ef_search=ef_search)
        nq = len(queries)
        all_scores, all_pids = [], []
        for searcher, offset, deleted in self.parts:
            if allowed is not None:
                local = allowed[offset:offset + searcher.ntotal]
                if deleted is not None:
                    local = local & ~deleted
                scores, pids = searcher.search_allowed(queries, k, local, nprobe=nprobe, ef_search=ef_search)
                all_scores.append(scores.astype(np.float32))
                all_pids.append(np.where(pids >= 0, pids + offset, -1))
                continue
            extra = int(deleted.sum()) if deleted is not None else 0
            scores, pids = searcher.search(queries, k + extra, nprobe=nprobe, ef_search=ef_search)
            valid = pids >= 0
            if deleted is not None:
                valid &= ~deleted[np.where(valid, pids, 0)]
            all_scores.append(np.where(valid, scores, -np.inf).astype(np.float32))
            all_pids.append(np.where(valid, pids + offset, -1))
        scores = np.concatenate(all_scores, axis=1) if all_scores else np.zeros((nq, 0), np.float32)
        pids = np.concatenate(all_pids, axis=1) if all_pids else np.zeros((nq, 0), np.int64)
        k = min(k, scores.shape[1])
        out_s = np.full((nq, k), -np.inf, np.float32)
        out_p = np.full((nq, k), -1, np.int64)
        for q in range(nq):
            order = np.lexsort((pids[q], -scores[q]))[:k]
            out_s[q], out_p[q] = scores[q, order], pids[q, order]
        out_p[~np.isfinite(out_s)] = -1
        return out_s, out_p


def _check_size(gen: Generation, seg: Segment, path: Path) -> None:
    want = (gen.files or {}).get(seg.rel(DENSE_FILE))
    if want is not None and path.is_file() and path.stat().st_size != int(want["bytes"]):
        raise EmbedctlError(f"{path}: {path.stat().st_size} bytes, the index records {want['bytes']}",
                            hint="the index is damaged: rebuild it (`embedctl index ... --overwrite`)")
