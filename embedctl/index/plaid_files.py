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
    """A finished PLAID index, loaded: the metadata, the small arrays in memory, the rest memory-mapped."""

    index_dir: Path              # the index folder (embedctl_index.json)
    meta: dict[str, Any]         # embedctl_index.json
    plaid: dict[str, Any]        # its plaid section
    centroids: np.ndarray        # float32 [C, dim], in memory (stored float16)
    avg_residual: np.ndarray     # float32 [dim]
    bucket_cutoffs: np.ndarray   # float32 [2^nbits - 1]
    bucket_weights: np.ndarray   # float32 [2^nbits]
    codes: list[np.ndarray]      # per chunk, memory-mapped int32 [E_i]
    residuals: list[np.ndarray]  # per chunk, memory-mapped uint8 [E_i, dim * nbits / 8]
    norms: list[np.ndarray]      # per chunk, memory-mapped float16 [E_i]
    doclens: np.ndarray          # int64 [N], every chunk's doclens concatenated
    ivf: np.ndarray              # memory-mapped int32 (int64 when N >= 2^31) [ivf_entries]
    ivf_lengths: np.ndarray      # int32 [C]
    chunk_emb_starts: np.ndarray  # int64 [num_chunks + 1]: first vector of each chunk, then the total

    @property
    def arrays_dir(self) -> Path:
        return self.index_dir / PLAID_DIR


def open_plaid(index_dir: str | Path) -> PlaidArrays:
    """Read ``embedctl_index.json`` of a finished PLAID index folder and its arrays; every mismatch names the file."""
    index_dir = Path(index_dir)
    meta = M.read_metadata(index_dir)
    meta_path = index_dir / M.META_FILE
    if meta["kind"] != "plaid" or not isinstance(meta.get("plaid"), dict):
        raise EmbedctlError(f"{meta_path}: not an embedctl PLAID index (kind {meta['kind']!r})",
                            hint="point at an index built with a ColBERT model (index.kind=plaid)")
    p = meta["plaid"]
    try:
        n, dim, nbits, k = int(p["num_docs"]), int(p["dim"]), int(p["nbits"]), int(p["num_partitions"])
        chunks = list(p["chunks"])
        ivf_entries = int(p["ivf_entries"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EmbedctlError(f"{meta_path}: the plaid section lacks {exc}", hint=REBUILD) from exc
    d = index_dir / PLAID_DIR
    check = _Checker(d)
    centroids = check(CENTROIDS, np.float16, (k, dim), mmap=False)
    avg_residual = check(AVG_RESIDUAL, np.float32, (dim,), mmap=False)
    cutoffs = check(BUCKET_CUTOFFS, np.float32, ((1 << nbits) - 1,), mmap=False)
    weights = check(BUCKET_WEIGHTS, np.float32, (1 << nbits,), mmap=False)
    codes, residuals, norms, doclens = [], [], [], []
    for i, c in enumerate(chunks):
        files, e = chunk_files(i), int(c["num_embeddings"])
        codes.append(check(files["codes"], np.int32, (e,)))
        residuals.append(check(files["residuals"], np.uint8, (e, dim * nbits // 8)))
        norms.append(check(files["norms"], np.float16, (e,)))
        lens = np.asarray(check(files["doclens"], np.int32, (int(c["num_passages"]),)), dtype=np.int64)
        if int(lens.sum()) != e:
            raise EmbedctlError(f"{d / files['doclens']}: doclens sum to {int(lens.sum())} vectors, {meta_path} "
                                f"says {e} for chunk {i}", hint=REBUILD)
        doclens.append(lens)
    all_lens = np.concatenate(doclens) if doclens else np.zeros(0, np.int64)
    if len(all_lens) != n:
        raise EmbedctlError(f"{d}: the chunks hold {len(all_lens)} documents, {meta_path} says {n}", hint=REBUILD)
    ivf = check(IVF, np.int32 if n < 2**31 else np.int64, (ivf_entries,))
    ivf_lengths = check(IVF_LENGTHS, np.int32, (k,), mmap=False)
    if int(ivf_lengths.sum(dtype=np.int64)) != ivf_entries:
        raise EmbedctlError(f"{d / IVF_LENGTHS}: sums to {int(ivf_lengths.sum())}, {meta_path} says "
                            f"{ivf_entries} IVF entries", hint=REBUILD)
    starts = np.array([int(c["embedding_offset"]) for c in chunks] + [int(p["num_embeddings"])], dtype=np.int64)
    return PlaidArrays(index_dir=index_dir, meta=meta, plaid=p,
                       centroids=np.ascontiguousarray(centroids, dtype=np.float32), avg_residual=avg_residual,
                       bucket_cutoffs=cutoffs, bucket_weights=weights, codes=codes, residuals=residuals,
                       norms=norms, doclens=all_lens, ivf=ivf, ivf_lengths=ivf_lengths, chunk_emb_starts=starts)


class _Checker:
    """Loads one array file and checks its dtype and shape against the metadata."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __call__(self, name: str, dtype: Any, shape: tuple[int, ...], mmap: bool = True) -> np.ndarray:
        path = self.folder / name
        arr = load_npy(path, mmap=mmap, what="PLAID index array", hint=REBUILD)
        if arr.dtype != np.dtype(dtype) or tuple(arr.shape) != tuple(shape):
            raise EmbedctlError(f"{path}: {arr.dtype} {list(arr.shape)}, the index metadata says "
                                f"{np.dtype(dtype)} {list(shape)}", hint=REBUILD)
        return arr
