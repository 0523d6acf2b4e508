"""The dense kind: one vector per document in a faiss index (flat, IVF or HNSW) per segment.

Build: chunks of ``DENSE_CHUNK`` documents, each encoded by whichever rank claims it (several ranks write
``_work/dense/{k}.npy`` first; rank 0 adds the chunks in order, so 1 or N ranks write the same bytes; an
IVF trains on a document-seeded sample). Add: the new vectors in a faiss index of the base's type (an IVF
reuses the base's trained quantizer). Compact: the stored vectors read back, the live ones in one index.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.index.dense import DenseBuilder
from embedctl.index.dense_segments import reconstruct, write_dense_segment
from embedctl.index.encoding import encode_with_progress
from embedctl.index.files import DENSE_FILE, DENSE_WORK
from embedctl.index.generations import Generation, Segment
from embedctl.index.kinds.base import BuildJob, Failpoint, IndexKind
from embedctl.index.ledger import BuildLedger
from embedctl.util.io import load_npy, save_npy

DENSE_CHUNK = 512  # documents per dense chunk (and per encode call): fixed, never from the number of ranks
DENSE_BACKEND = {"name": "faiss", "precision": "fp32"}


@dataclass(frozen=True)
class DensePlan:
    backend_record: dict[str, str]


class DenseKind(IndexKind):
    name = "dense"
    model_kind = "biencoder"
    model_label = "bi-encoder"

    def plan(self, icfg: Any, encoder: Any, num_docs: int, engine: dict[str, Any]) -> DensePlan:
        return DensePlan(dict(DENSE_BACKEND))

    def already_built(self, ledger: BuildLedger, folder: Path) -> bool:
        return ledger.dense is not None

    def build(self, job: BuildJob, plan: Any) -> tuple[dict[str, Any], dict[str, float], dict[str, Any]]:
        """(dense section, timings, run facts); a dense index recorded in the ledger is kept."""
        if job.ledger.dense is not None and (job.folder / DENSE_FILE).is_file():
            job.bar.advance(job.num_docs)
            return job.ledger.dense, {}, {"encoded_docs": 0, "resumed": True}
        started = time.perf_counter()
        builder, encoded = dense_chunks(job)  # chunks of 512, any rank
        encode_s = time.perf_counter() - started
        started = time.perf_counter()
        params = builder.write(job.folder / DENSE_FILE)
        section = {**params, "encode_s": round(encode_s, 3), "faiss_s": round(time.perf_counter() - started, 3)}
        job.ledger.record_dense(section)
        return section, {}, {"encoded_docs": encoded, "resumed": False}

    def follow(self, job: BuildJob) -> None:
        dense_chunks(job)

    def write_segment(self, gen: Generation, seg: Segment, encoded: Any, dim: int, opts: Any, failpoint: Failpoint
                      ) -> tuple[None, list[str]]:
        seg.dense, rel = write_dense_segment(gen, seg.dir, np.asarray(encoded, dtype=np.float32))
        return None, [rel]

    def merge_segments(self, gen: Generation, seg: Segment, masks: list[np.ndarray], failpoint: Failpoint
                       ) -> list[str]:
        vectors = [reconstruct(gen.path(old.rel(DENSE_FILE)))[mask]
                   for old, mask in zip(gen.segments, masks, strict=True) if mask.any()]
        seg.dense, rel = write_dense_segment(gen, seg.dir, np.concatenate(vectors))
        return [rel]


def dense_chunks(job: BuildJob) -> tuple[DenseBuilder, int] | None:
    """Encode the dense chunks this rank claims; on rank 0, then, a DenseBuilder holding every chunk in order.

    One rank encodes each chunk straight into the builder (reusing ``_work/dense`` files a killed run of
    several ranks left); several write each chunk's vectors to ``_work/dense/{k}.npy`` first (temp name +
    rename: a file present is a chunk finished). Returns (builder, documents encoded here) on rank 0."""
    icfg, ranks, bar = job.icfg, job.ranks, job.bar
    items = job.collection.plaid_items(job.folder)
    n = len(items)
    num_chunks = (n + DENSE_CHUNK - 1) // DENSE_CHUNK
    work = job.folder / DENSE_WORK
    builder = DenseBuilder(job.encoder.dim, icfg.dense_type, nlist=icfg.ivf_nlist, hnsw_m=icfg.hnsw_m,
                           hnsw_ef_construction=icfg.hnsw_ef_construction, seed=icfg.seed) if ranks.is_lead else None
    encoded = 0

    def path(k: int) -> Path:
        return work / f"{k:06d}.npy"

    def encode(k: int) -> np.ndarray:
        nonlocal encoded
        part = items[k * DENSE_CHUNK:min(n, (k + 1) * DENSE_CHUNK)]
        encoded += len(part)
        return np.asarray(encode_with_progress(job.encoder, part, icfg.batch_size, bar), dtype=np.float32)

    if ranks.world == 1:
        for k in range(num_chunks):
            if path(k).is_file():
                builder.add(load_npy(path(k), mmap=False, what="dense chunk vectors"))
                bar.advance(min(n, (k + 1) * DENSE_CHUNK) - k * DENSE_CHUNK)
            else:
                builder.add(encode(k))
        return builder, encoded
    for k in ranks.claims("dense-chunks", num_chunks):
        if not path(k).is_file():
            save_npy(path(k), encode(k))
    ranks.barrier("dense-encoded")
    if not ranks.is_lead:
        return None
    for k in range(num_chunks):
        builder.add(load_npy(path(k), mmap=False, what="dense chunk vectors"))
    return builder, encoded
