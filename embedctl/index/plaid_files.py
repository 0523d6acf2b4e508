"""PLAID arrays on disk (spec: docs/index-format.md): file names, and the one loader of a finished index.

An index folder holds ``embedctl_index.json`` (its ``plaid`` section describes the arrays) and the arrays in
``plaid/``. :func:`open_plaid` reads both and checks every file's presence, dtype and shape against the
metadata, naming the file on any mismatch.

Example::

    arrays = open_plaid("indexes/scifact")
    arrays.plaid["num_partitions"], arrays.centroids.shape      # 8192, (8192, 128) float32
    arrays.codes[0][:5]                                         # memory-mapped int32
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index import meta as M
from embedctl.index.generations import Generation, open_generation
from embedctl.util.io import load_npy

PLAID_DIR = "plaid"  # the arrays, inside the index folder
CENTROIDS = "centroids.npy"
AVG_RESIDUAL = "avg_residual.npy"
BUCKET_CUTOFFS = "bucket_cutoffs.npy"
BUCKET_WEIGHTS = "bucket_weights.npy"
IVF = "ivf.npy"
IVF_LENGTHS = "ivf_lengths.npy"
CODEC_FILES = (CENTROIDS, AVG_RESIDUAL, BUCKET_CUTOFFS, BUCKET_WEIGHTS)
REBUILD = "the index is damaged: rebuild it (`embedctl index ... --overwrite`, index.overwrite=true)"


def chunk_files(i: int) -> dict[str, str]:
    """Names of chunk ``i``'s arrays (a chunk is finished when the build ledger records it)."""
    return {
        "codes": f"{i}.codes.npy",          # int32 [E_i]: centroid id per vector
        "residuals": f"{i}.residuals.npy",  # uint8 [E_i, dim * nbits / 8]: packed residual buckets
        "norms": f"{i}.norms.npy",          # float16 [E_i]: norm of each decompressed vector (for scoring)
        "doclens": f"doclens.{i}.npy",      # int32 [n_i]: vectors per document
    }


@dataclass
class PlaidArrays:
    """A PLAID index (one generation of it), loaded: the metadata, the small arrays in memory, the rest
    memory-mapped. Pids run over the generation's segments in order (segment ``s`` from ``segment_offsets[s]``)."""

    index_dir: Path              # the index folder (embedctl_index.json)
    meta: dict[str, Any]         # embedctl_index.json
    plaid: dict[str, Any]        # its plaid section (generation 0), or the same figures for the whole generation
    centroids: np.ndarray        # float32 [C, dim], in memory (stored float16)
    avg_residual: np.ndarray     # float32 [dim]
    bucket_cutoffs: np.ndarray   # float32 [2^nbits - 1]
    bucket_weights: np.ndarray   # float32 [2^nbits]
    codes: list[np.ndarray]      # per chunk, memory-mapped int32 [E_i]
    residuals: list[np.ndarray]  # per chunk, memory-mapped uint8 [E_i, dim * nbits / 8]
    norms: list[np.ndarray]      # per chunk, memory-mapped float16 [E_i]
    doclens: np.ndarray          # int64 [N], every chunk's doclens concatenated
    ivf: np.ndarray              # int32 (int64 when N >= 2^31) [ivf_entries]; tombstoned pids left out
    ivf_lengths: np.ndarray      # int32 [C]
    chunk_emb_starts: np.ndarray  # int64 [num_chunks + 1]: first vector of each chunk, then the total
    deleted: np.ndarray | None = None   # bool [N] tombstoned rows (None: none)
    segment_offsets: np.ndarray | None = None  # int64 [segments + 1]: first pid of each segment, then N
    generation: Any = None       # the embedctl.index.generations.Generation it was opened from

    @property
    def arrays_dir(self) -> Path:
        return self.index_dir / PLAID_DIR


def open_plaid(index_dir: str | Path | Generation) -> PlaidArrays:
    """Read the newest generation of a PLAID index folder (or the given Generation) and its arrays; every
    mismatch (size against the commit's records, dtype or shape against the metadata) names the file."""
    gen = index_dir if isinstance(index_dir, Generation) else open_generation(Path(index_dir))
    meta, index_dir = gen.meta, gen.index_dir
    meta_path = index_dir / M.META_FILE
    if meta["kind"] != "plaid" or not isinstance(meta.get("plaid"), dict):
        raise EmbedctlError(f"{meta_path}: not an embedctl PLAID index (kind {meta['kind']!r})",
                            hint="point at an index built with a ColBERT model (index.kind=plaid)")
    p = meta["plaid"]
    try:
        dim, nbits = int(p["dim"]), int(p["nbits"])
        k = int(gen.codec["num_partitions"])
        for s in gen.segments:
            list(s.plaid["chunks"]), int(s.plaid["ivf_entries"]), int(s.plaid["num_partitions"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EmbedctlError(f"{meta_path}: the plaid section lacks {exc}", hint=REBUILD) from exc
    check = _Checker(index_dir, gen.files or {})
    files = gen.codec["files"]
    centroids = check(files["centroids"], np.float16, (k, dim), mmap=False)
    avg_residual = check(files["avg_residual"], np.float32, (dim,), mmap=False)
    cutoffs = check(files["bucket_cutoffs"], np.float32, ((1 << nbits) - 1,), mmap=False)
    weights = check(files["bucket_weights"], np.float32, (1 << nbits,), mmap=False)
    codes, residuals, norms, doclens, starts = [], [], [], [], [0]
    ivfs: list[tuple[np.ndarray, np.ndarray]] = []
    for seg in gen.segments:
        d = seg.rel(PLAID_DIR)
        seg_lens = []
        for i, c in enumerate(seg.plaid["chunks"]):
            names, e = chunk_files(i), int(c["num_embeddings"])
            codes.append(check(f"{d}/{names['codes']}", np.int32, (e,)))
            residuals.append(check(f"{d}/{names['residuals']}", np.uint8, (e, dim * nbits // 8)))
            norms.append(check(f"{d}/{names['norms']}", np.float16, (e,)))
            lens = np.asarray(check(f"{d}/{names['doclens']}", np.int32, (int(c["num_passages"]),)), dtype=np.int64)
            if int(lens.sum()) != e:
                raise EmbedctlError(f"{index_dir / d / names['doclens']}: doclens sum to {int(lens.sum())} vectors, "
                                    f"{meta_path} says {e} for chunk {i}", hint=REBUILD)
            seg_lens.append(lens)
            starts.append(starts[-1] + e)
        n = int(sum(len(x) for x in seg_lens))
        if n != seg.rows:
            raise EmbedctlError(f"{index_dir / d}: the chunks hold {n} documents, the index says {seg.rows}",
                                hint=REBUILD)
        doclens += seg_lens
        ks, entries = int(seg.plaid["num_partitions"]), int(seg.plaid["ivf_entries"])
        ivf = check(f"{d}/{IVF}", np.int32 if n < 2**31 else np.int64, (entries,))
        ivf_lengths = check(f"{d}/{IVF_LENGTHS}", np.int32, (ks,), mmap=False)
        if int(ivf_lengths.sum(dtype=np.int64)) != entries:
            raise EmbedctlError(f"{index_dir / d / IVF_LENGTHS}: sums to {int(ivf_lengths.sum())}, the index says "
                                f"{entries} IVF entries", hint=REBUILD)
        ivfs.append((ivf, ivf_lengths))
    all_lens = np.concatenate(doclens) if doclens else np.zeros(0, np.int64)
    offsets = np.cumsum([0] + [s.rows for s in gen.segments]).astype(np.int64)
    deleted = None
    if gen.deleted:
        deleted = np.zeros(len(all_lens), dtype=bool)
        for s, seg in enumerate(gen.segments):
            deleted[offsets[s] + gen.deleted_rows(seg)] = True
    if len(ivfs) == 1 and deleted is None and len(ivfs[0][1]) == k:
        ivf, ivf_lengths = ivfs[0]
    else:
        ivf, ivf_lengths = merge_ivf(ivfs, offsets, k, deleted)
    plaid = p if gen.number == 0 else {
        **p, "num_docs": int(len(all_lens)), "num_partitions": k, "num_embeddings": int(starts[-1]),
        "avg_doclen": float(starts[-1]) / max(1, len(all_lens)), "ivf_entries": int(len(ivf)),
        "num_chunks": len(codes), "chunks": None, "generation": gen.number}
    return PlaidArrays(index_dir=index_dir, meta=meta, plaid=plaid,
                       centroids=np.ascontiguousarray(centroids, dtype=np.float32), avg_residual=avg_residual,
                       bucket_cutoffs=cutoffs, bucket_weights=weights, codes=codes, residuals=residuals,
                       norms=norms, doclens=all_lens, ivf=ivf, ivf_lengths=ivf_lengths,
                       chunk_emb_starts=np.asarray(starts, dtype=np.int64), deleted=deleted,
                       segment_offsets=offsets, generation=gen)


def merge_ivf(ivfs: list[tuple[np.ndarray, np.ndarray]], offsets: np.ndarray, num_partitions: int,
              deleted: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One IVF over every segment's (local ivf, lengths), pids shifted by the segment's offset, tombstoned
    pids left out: per centroid, the sorted pids of segment 0, then segment 1, ... (already sorted)."""
    total = int(offsets[-1])
    codes_parts, pid_parts = [], []
    for s, (ivf, lengths) in enumerate(ivfs):
        codes_parts.append(np.repeat(np.arange(len(lengths), dtype=np.int64), np.asarray(lengths, np.int64)))
        pid_parts.append(np.asarray(ivf, dtype=np.int64) + offsets[s])
    codes = np.concatenate(codes_parts) if codes_parts else np.zeros(0, np.int64)
    pids = np.concatenate(pid_parts) if pid_parts else np.zeros(0, np.int64)
    if deleted is not None:
        keep = ~deleted[pids]
        codes, pids = codes[keep], pids[keep]
    order = np.argsort(codes, kind="stable")  # segments in order, each sorted: pids stay sorted per centroid
    pids = pids[order].astype(np.int32 if total < 2**31 else np.int64)
    return pids, np.bincount(codes, minlength=num_partitions).astype(np.int32)


class _Checker:
    """Loads one array file and checks its dtype and shape against the metadata, then its size against the
    generation's file records."""

    def __init__(self, folder: Path, records: dict[str, dict[str, Any]]):
        self.folder, self.records = folder, records

    def __call__(self, name: str, dtype: Any, shape: tuple[int, ...], mmap: bool = True) -> np.ndarray:
        path = self.folder / name  # name: relative to the index folder
        arr = load_npy(path, mmap=mmap, what="PLAID index array", hint=REBUILD)
        if arr.dtype != np.dtype(dtype) or tuple(arr.shape) != tuple(shape):
            raise EmbedctlError(f"{path}: {arr.dtype} {list(arr.shape)}, the index metadata says "
                                f"{np.dtype(dtype)} {list(shape)}", hint=REBUILD)
        want = self.records.get(name)
        if want is not None and path.stat().st_size != int(want["bytes"]):
            raise EmbedctlError(f"{path}: {path.stat().st_size} bytes, the index records {want['bytes']}",
                                hint=REBUILD)
        return arr
