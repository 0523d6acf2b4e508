"""PLAID segments written after the build: new documents compressed with the index's own codec, and drift.

``embedctl index add`` encodes only the new documents, rounds them to float16 (the representation every
document of a build is compressed from), assigns them to the existing centroids and packs their residuals
with the existing bucket cutoffs, on the backend the index records (an exact CPU backend where that one
cannot run here: every exact backend gives the same bytes). The segment gets one chunk and its own IVF
(local pids), in ``segments/g<N>/plaid/`` with the same file names as a build's chunk 0.

Drift: the build's held-out vectors give ``avg_residual`` (mean |residual| per dimension). An added vector
whose mean |residual| exceeds ``index.drift_threshold`` times the held-out mean is an outlier; the batch's
``ratio`` is its mean |residual| over the held-out mean (about 1 for documents like the collection's). When
the ratio passes the threshold, ``index.drift_action`` decides: ``warn`` (the summary and `index info` say a
rebuild is due), ``expand`` (k-means on the outliers adds new centroids, next-plaid's expand: the codec
gets a new centroids file, the old segments keep their codes, and the new documents are compressed
against the grown set) or ``ignore``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import ConfigError
from embedctl.index.files import PLAID_DIR, grown_codec_file, plaid_chunk_files
from embedctl.index.generations import Generation
from embedctl.index.plaid import codec as codec_mod
from embedctl.index.plaid import kmeans
from embedctl.index.plaid.backends import INDEX_PRECISIONS, index_backend
from embedctl.index.plaid.ivf import build_ivf
from embedctl.index.plaid.reference import Backend
from embedctl.index.plaid.sample import float16_rounded
from embedctl.util.io import load_npy, save_npy

DRIFT_ACTIONS = ("warn", "expand", "ignore")
POINTS_PER_NEW_CENTROID = 32  # outlier vectors per grown centroid (the build's k-means default)
MIN_OUTLIERS = 16             # fewer outliers than this grow nothing


def load_codec(gen: Generation) -> codec_mod.Codec:
    files = gen.codec["files"]

    def load(name: str) -> np.ndarray:
        return np.asarray(load_npy(gen.path(files[name]), mmap=False, what="PLAID codec array"))

    return codec_mod.Codec(centroids=load("centroids"), avg_residual=load("avg_residual"),
                           bucket_cutoffs=load("bucket_cutoffs"), bucket_weights=load("bucket_weights"),
                           nbits=int(gen.meta["plaid"]["nbits"]))


def recorded_backend(meta: dict[str, Any], device: str = "cpu") -> Backend:
    """The backend the index records, or the exact CPU backend this machine runs where that one cannot run
    here (a GPU build updated on a CPU, a bf16 build on a CPU without AMX): every exact backend assigns the
    same centroids, so the bytes are the same."""
    rec = meta.get("backend") or {}
    name, precision = str(rec.get("name", "auto")), str(rec.get("precision", "auto"))
    if precision not in INDEX_PRECISIONS:
        precision = "auto"
    try:
        return index_backend(device, precision, name if name in ("native", "reference", "torch") else "auto")
    except ConfigError:
        return index_backend("cpu", "auto", "auto")


def encode_rounded(vecs: Any, doclens: Any, dim: int) -> tuple[np.ndarray, np.ndarray]:
    vecs = np.asarray(vecs.numpy() if hasattr(vecs, "numpy") else vecs, dtype=np.float32).reshape(-1, dim)
    doclens = np.asarray(doclens.numpy() if hasattr(doclens, "numpy") else doclens, dtype=np.int64)
    return float16_rounded(vecs), doclens


def residual_means(codec: codec_mod.Codec, vecs: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """float32 [n]: mean |vector - its centroid| over the dimensions, per vector (blockwise)."""
    cf = codec.centroids_f32()
    out = np.empty(len(vecs), dtype=np.float32)
    for lo in range(0, len(vecs), 65536):
        part = vecs[lo:lo + 65536]
        out[lo:lo + len(part)] = np.abs(part - cf[codes[lo:lo + len(part)]]).mean(axis=1)
    return out


def compress_with_drift(codec: codec_mod.Codec, vecs: np.ndarray, backend: Backend, threshold: float,
                        action: str, seed: int, niters: int) -> tuple[np.ndarray, np.ndarray, codec_mod.Codec,
                                                                     dict[str, Any]]:
    """(codes, packed residuals, the codec used (grown by ``expand``), the drift record)."""
    if action not in DRIFT_ACTIONS:
        raise ConfigError([f"`index.drift_action` = {action!r}: expected one of {', '.join(DRIFT_ACTIONS)}"])
    codes, packed = codec.compress(vecs, backend=backend)
    held = float(np.mean(codec.avg_residual))
    per_vec = residual_means(codec, vecs, codes)
    ratio = float(per_vec.mean() / held) if len(per_vec) else 1.0
    outliers = per_vec > threshold * held
    record: dict[str, Any] = {"ratio": round(ratio, 4), "threshold": threshold, "heldout_mean": round(held, 6),
                              "vectors": int(len(vecs)), "outliers": int(outliers.sum()), "action": "none"}
    if ratio <= threshold or action == "ignore":
        record["action"] = "none" if ratio <= threshold else "ignored"
        return codes, packed, codec, record
    if action == "warn" or int(outliers.sum()) < MIN_OUTLIERS:
        record["action"] = "rebuild_due"
        record["message"] = (f"the added vectors sit {ratio:.2f}x as far from their centroids as the build's "
                             f"held-out vectors (threshold {threshold}): a rebuild is due "
                             "(`embedctl index --overwrite`), or set index.drift_action=expand")
        return codes, packed, codec, record
    x = np.ascontiguousarray(vecs[outliers])
    k_new = max(1, min(len(x) // POINTS_PER_NEW_CENTROID, len(x)))
    grown = kmeans.train_centroids(x, k_new, niters=niters, seed=seed, backend=backend)
    codec = codec_mod.Codec(centroids=np.concatenate([codec.centroids, grown]).astype(np.float16),
                            avg_residual=codec.avg_residual, bucket_cutoffs=codec.bucket_cutoffs,
                            bucket_weights=codec.bucket_weights, nbits=codec.nbits)
    codes, packed = codec.compress(vecs, backend=backend)
    after = residual_means(codec, vecs, codes)
    record.update(action="expanded", new_centroids=int(k_new), num_partitions=int(len(codec.centroids)),
                  ratio_after=round(float(after.mean() / held), 4),
                  message=f"the added vectors drifted ({ratio:.2f}x the held-out residual): {k_new} centroid(s) "
                          f"added ({len(codec.centroids)} in all), residual now {after.mean() / held:.2f}x")
    return codes, packed, codec, record


def save_grown_codec(gen: Generation, codec: codec_mod.Codec, number: int) -> list[str]:
    """Write the grown centroids as ``codec/centroids.g<N>.npy`` and point ``gen.codec`` at it."""
    rel = grown_codec_file("centroids", number)
    save_npy(gen.path(rel), codec.centroids)
    gen.codec = {**gen.codec, "num_partitions": int(len(codec.centroids)),
                 "files": {**gen.codec["files"], "centroids": rel}}
    return [rel]


def write_plaid_segment(index_dir: Path, seg_dir: str, chunks: Iterable[tuple], codec: codec_mod.Codec,
                        backend: Backend, failpoint=None) -> tuple[dict[str, Any], list[str]]:
    """Write chunks ``(codes, packed, doclens[, norms])`` (one at a time: bounded memory; norms computed when
    not given) and their IVF into ``<seg_dir>/plaid/``; returns the segment's plaid description and the files
    written (relative to the index)."""
    out = index_dir / seg_dir / PLAID_DIR
    written, records, emb_offset, pid_offset = [], [], 0, 0
    for i, chunk in enumerate(chunks):
        codes, packed, doclens = chunk[0], chunk[1], chunk[2]
        norms = chunk[3] if len(chunk) > 3 else codec.norms(codes, packed, backend=backend)
        names = plaid_chunk_files(i)
        for key, arr in (("codes", np.asarray(codes, np.int32)), ("residuals", packed), ("norms", norms),
                         ("doclens", np.asarray(doclens, np.int32))):
            save_npy(out / names[key], arr)
            written.append(f"{seg_dir}/{PLAID_DIR}/{names[key]}")
        records.append({"passage_offset": pid_offset, "num_passages": int(len(doclens)),
                        "embedding_offset": emb_offset, "num_embeddings": int(len(codes))})
        emb_offset += int(len(codes))
        pid_offset += int(len(doclens))
        if failpoint is not None:
            failpoint("chunk-written")
    k = int(len(codec.centroids))

    def per_chunk():  # the IVF from the written files, one chunk in memory at a time
        for i, r in enumerate(records):
            names = plaid_chunk_files(i)
            yield load_npy(out / names["codes"]), load_npy(out / names["doclens"]), r["passage_offset"]

    ivf, lengths = build_ivf(per_chunk(), k, max(1, pid_offset))
    for name, arr in (("ivf.npy", ivf), ("ivf_lengths.npy", lengths)):
        save_npy(out / name, arr)
        written.append(f"{seg_dir}/{PLAID_DIR}/{name}")
    return {"chunks": records, "num_embeddings": emb_offset, "ivf_entries": int(len(ivf)), "num_partitions": k}, written


def split_chunks(codes: np.ndarray, packed: np.ndarray, doclens: np.ndarray, chunk_size: int
                 ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Cut one run of documents into chunks of ``chunk_size`` documents (a build's layout)."""
    starts = np.concatenate([[0], np.cumsum(doclens)]).astype(np.int64)
    out = []
    for lo in range(0, max(1, len(doclens)), chunk_size):
        hi = min(len(doclens), lo + chunk_size)
        a, b = starts[lo], starts[hi]
        out.append((codes[a:b], packed[a:b], doclens[lo:hi]))
    return out
