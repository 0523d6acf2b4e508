"""The PLAID kind (ColBERTv2 late interaction): token vectors compressed to a centroid id and packed
residual buckets, with an IVF from centroids to documents, per segment; the codec is the index's.

Build: :class:`~embedctl.index.plaid_indexer.PlaidIndexer` (sample -> k-means -> codec -> chunks -> IVF),
each stage recorded in the ledger, chunks shared out to the ranks. Add: the new vectors compressed with the
index's codec (its drift measured against the build's; ``index.drift_action=expand`` grows centroids),
written as a segment with its own IVF. Compact: the live documents' codes, residuals and norms copied as
stored, chunk by chunk, and a new IVF.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index import plaid_segments as PS
from embedctl.index import recluster as R
from embedctl.index.encoding import default_device
from embedctl.index.files import DIGESTS_FILE
from embedctl.index.generations import Generation, Segment
from embedctl.index.kinds.base import BuildJob, Failpoint, IndexKind, with_encoder
from embedctl.index.ledger import describe_backend, normalized
from embedctl.index.plaid.ivf import ranges_index
from embedctl.index.plaid.reference import Backend
from embedctl.index.plaid_files import KIND, PlaidArrays, open_plaid
from embedctl.index.plaid_indexer import PlaidIndexer, PlaidSettings, plaid_backend
from embedctl.util.io import load_npy

DEFAULT_CHUNK_SIZE = 25_000


@dataclass(frozen=True)
class PlaidPlan:
    settings: PlaidSettings
    backend: Backend

    @property
    def backend_record(self) -> dict[str, str]:
        return self.backend.describe()


class PlaidKind(IndexKind):
    name = KIND
    model_kind = "colbert"
    model_label = "ColBERT"
    searches_on_encoder_device = True

    def plan(self, icfg: Any, encoder: Any, num_docs: int, engine: dict[str, Any]) -> PlaidPlan:
        return PlaidPlan(_settings(icfg, encoder, num_docs, engine), plaid_backend(icfg, engine.get("device")))

    def build(self, job: BuildJob, plan: Any) -> tuple[dict[str, Any], dict[str, float], dict[str, Any]]:
        indexer = PlaidIndexer(job.encoder, job.collection.plaid_items(job.folder), job.digests, job.folder,
                               job.ledger, plan.settings, plan.backend, job.bar, job.ranks)
        section = indexer.run()
        return section, indexer.timings_record(), indexer.run_record()

    def follow(self, job: BuildJob) -> None:
        backend = plaid_backend(job.icfg, job.engine.get("device"))
        mine = normalized(with_encoder(backend.describe(), job.encoder))
        if mine != job.ledger.backend:
            raise EmbedctlError(f"rank {job.ranks.rank} computes on backend {describe_backend(mine)}, "
                                f"rank 0 on {describe_backend(job.ledger.backend)}: their bytes would differ",
                                hint="set index.backend and index.assign_precision so every node picks the same "
                                     "(and index.threads where the record names the encoder's threads)")
        digests = np.asarray(load_npy(job.folder / DIGESTS_FILE, mmap=False, what="document digests"))
        settings = _settings(job.icfg, job.encoder, job.num_docs, job.engine)
        PlaidIndexer(job.encoder, job.collection.plaid_items(job.folder), digests, job.folder, job.ledger, settings,
                     backend, job.bar, job.ranks).run()

    def write_segment(self, gen: Generation, seg: Segment, encoded: Any, dim: int, opts: Any, failpoint: Failpoint
                      ) -> tuple[dict[str, Any], list[str]]:
        vecs, doclens = PS.encode_rounded(encoded[0], encoded[1], dim)
        trained, added = R.codec_counts(gen)  # before a grown codec replaces gen.codec
        codec = PS.load_codec(gen)
        backend = PS.recorded_backend(gen.meta, default_device())
        p = gen.meta["plaid"]
        codes, packed, codec, drift = PS.compress_with_drift(codec, vecs, backend, opts.drift_threshold,
                                                             opts.drift_action, int(p.get("seed", 0)) + gen.number,
                                                             int(p.get("kmeans_niters", 4)))
        files = PS.save_grown_codec(gen, codec, gen.number) if drift["action"] == "expanded" else []
        chunks = PS.split_chunks(codes, packed, doclens, _chunk_size(gen))
        seg.plaid, written = PS.write_plaid_segment(gen.index_dir, seg.dir, chunks, codec, backend,
                                                    lambda n: failpoint(f"add:{n}"))
        gen.codec = {**gen.codec, "trained_docs": trained, "added_docs": added + seg.rows}
        return drift, files + written

    def recluster_reason(self, gen: Generation, num_add: int, opts: Any) -> str | None:
        return R.recluster_reason(gen, num_add, opts.recluster_below_docs, opts.recluster_add_ratio)

    def recluster(self, gen: Generation, new: Generation, add: list, dropped: tuple[np.ndarray, np.ndarray],
                  use_title: bool, encoder: Any, reason: str, opts: Any, failpoint: Failpoint) -> R.Reclustered:
        return R.recluster(gen, new, add, dropped, use_title, encoder, reason, opts.progress, failpoint)

    def merge_segments(self, gen: Generation, seg: Segment, masks: list[np.ndarray], failpoint: Failpoint
                       ) -> list[str]:
        """Copy the taken rows' codes, residuals and norms chunk by chunk (a build's chunk size)."""
        arrays = open_plaid(gen)
        live = np.flatnonzero(np.concatenate(masks))  # the rows taken (compact: every live row; a merge: a run's)
        offsets = np.concatenate([[0], np.cumsum(arrays.doclens)]).astype(np.int64)
        chunk_size = _chunk_size(gen)

        def chunks():
            for lo in range(0, len(live), chunk_size):
                pids = live[lo:lo + chunk_size]
                lens = arrays.doclens[pids]
                codes, packed, norms = _gather(arrays, ranges_index(offsets[pids], lens))
                yield codes, packed, lens, norms  # copied as stored: nothing is encoded or compressed again

        seg.plaid, written = PS.write_plaid_segment(gen.index_dir, seg.dir, chunks(), PS.load_codec(gen),
                                                    PS.recorded_backend(gen.meta), failpoint)
        return written

    def describe(self, gen: Generation) -> dict[str, Any]:
        return {"num_partitions": int(gen.codec["num_partitions"]),
                "built_partitions": int(gen.meta["plaid"]["num_partitions"])}


def _settings(icfg: Any, encoder: Any, num_docs: int, engine: dict[str, Any]) -> PlaidSettings:
    return PlaidSettings.resolve(icfg, encoder.dim, num_docs, engine.get("sample_docs"),
                                 engine.get("kmeans_points_per_centroid"))


def _chunk_size(gen: Generation) -> int:
    return int(gen.meta["plaid"].get("chunk_size") or DEFAULT_CHUNK_SIZE)


def _gather(arrays: PlaidArrays, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """codes, packed residuals and norms of sorted global vector indices, across chunk files."""
    starts = arrays.chunk_emb_starts
    bounds = np.searchsorted(idx, starts)
    parts = []
    for i in range(len(arrays.codes)):
        lo, hi = bounds[i], bounds[i + 1]
        if hi > lo:
            local = idx[lo:hi] - starts[i]
            parts.append((np.take(arrays.codes[i], local), np.take(arrays.residuals[i], local, axis=0),
                          np.take(arrays.norms[i], local)))
    if not parts:
        nbytes = arrays.residuals[0].shape[1] if arrays.residuals else 0
        return np.zeros(0, np.int32), np.zeros((0, nbytes), np.uint8), np.zeros(0, np.float16)
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]
