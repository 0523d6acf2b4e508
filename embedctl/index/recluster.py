"""A PLAID add that re-clusters: new centroids and buckets for every live document and the new ones.

An add normally compresses the new documents with the index's codec, trained on the documents of the
build. When the codec has seen too few of the documents it serves, that costs quality: a 480-document
SciFact index grown by 480 more scored nDCG@10 0.035 below a fresh build of the 960 on the mean of 3 k-means
seeds (0.645 vs 0.680; bench/grow_vs_fresh.py; re-clustered: 0.680, the same bytes as the fresh build).
:func:`recluster_reason` says when an add re-clusters instead (PLAID only):

- ``small``: the index holds fewer live documents than ``index.recluster_below_docs`` (default 1000, as
  next-plaid): re-encoding it costs at most that many documents more than the add itself;
- ``large add``: the documents added since the codec was trained (this add included; the commit's
  ``codec.added_docs``) reach ``index.recluster_add_ratio`` times those it was trained on
  (``codec.trained_docs``; default 1.0: each time the index doubles, so the re-encoding over any
  sequence of adds stays within about twice the documents' own encoding).

:func:`recluster` then writes ONE new segment, ``segments/g<N>/``, holding the live documents of every
segment in pid order followed by the added ones (an update's old row is dropped, its new text added),
and runs the build's own engine (embedctl.index.plaid_indexer.PlaidIndexer: sample, k-means, codec,
chunks, IVF) on them with the settings the build recorded (``request.index``: seed, nbits, k-means,
chunk and batch sizes), on the index's recorded backend. Its codec lands beside the chunks
(``segments/g<N>/plaid/centroids.npy`` ...) and becomes the generation's ``codec``; the old segments and
their tombstones are no longer referenced (deleted two generations later, as after compact).

What is kept to do so: nothing more than today. Each segment's ``docs.parquet`` holds every document's
text (and title when the build used titles), so re-encoding it gives exactly what a fresh build encodes:
the result IS a fresh build of those documents in that order, byte for byte. Training on the stored codes
and residuals decompressed instead (no re-encoding, approximate vectors) was measured and left out: on the
slice above it scored 0.033 below a fresh build on the mean of 3 seeds (per seed +0.007, -0.035, -0.070),
no better than not re-clustering (bench/results/x86_64-avx2-2c/grow_vs_fresh.json, commit d6e8da0).

Kill -9 safe like every change: everything is written under ``segments/g<N>/`` before the commit (the
engine's ledger and k-means sample under it are build-only files, collected after the commit), a killed
run's files are collected by the next writer, and every step is seeded: a rerun writes the same bytes.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from embedctl.config.sections.index import IndexConfig
from embedctl.data.sources import TextRecord
from embedctl.index import meta as M
from embedctl.index import plaid_segments as PS
from embedctl.index.collection import DocTexts
from embedctl.index.docs import DocDigests, DocTableWriter, iter_doc_batches
from embedctl.index.encoding import default_device
from embedctl.index.fields import segment_fields
from embedctl.index.files import (
    CODEC_FILES,
    FIELDS_FILE,
    IDS_FILE,
    LEDGER_FILE,
    PLAID_DIR,
    WORK_DIR,
    segment_dir,
)
from embedctl.index.generations import Generation, Segment
from embedctl.index.idtable import id_table
from embedctl.index.ledger import BuildLedger
from embedctl.index.plaid_indexer import PlaidIndexer, PlaidSettings
from embedctl.util.io import save_npy
from embedctl.util.progress import Progress


def codec_counts(gen: Generation) -> tuple[int, int]:
    """(documents the generation's codec was trained on, documents added with it since). A commit written
    before these were recorded: the build's documents, and every row beyond them."""
    codec = gen.codec or {}
    trained = int(codec.get("trained_docs", gen.meta["num_docs"]))
    added = int(codec.get("added_docs", max(0, gen.rows - trained)))
    return trained, added


def recluster_reason(gen: Generation, num_add: int, below_docs: int, add_ratio: float | None) -> str | None:
    """Why an add of ``num_add`` documents to the PLAID index ``gen`` re-clusters (a sentence naming the rule), or
    None (embedctl.index.kinds.plaid asks it; other kinds never re-cluster)."""
    live = gen.num_docs
    if below_docs and live < below_docs:
        return f"the index holds {live} document(s), fewer than index.recluster_below_docs={below_docs}"
    trained, added = codec_counts(gen)
    if add_ratio is not None and added + num_add >= add_ratio * trained:
        return (f"{added + num_add} document(s) added since its centroids were trained on {trained}, at least "
                f"index.recluster_add_ratio={add_ratio:g} times as many")
    return None


@dataclass
class Reclustered:
    segment: Segment
    codec: dict[str, Any]
    files: list[str]      # every file written, relative to the index
    record: dict[str, Any]  # the summary's `recluster` entry
    encoded_docs: int
    encode_s: float


def recluster(gen: Generation, new: Generation, add: list[TextRecord], dropped: tuple[np.ndarray, np.ndarray],
              use_title: bool, encoder: Any, reason: str, progress: bool, on_stage: Callable[[str], None]
              ) -> Reclustered:
    """Write generation ``new``'s one segment: the live documents of ``gen`` (minus the rows ``dropped``:
    (segment index, local pid) of the documents this add replaces) then ``add``, re-clustered."""
    seg_dir = segment_dir(new.number)
    folder = gen.index_dir / seg_dir
    folder.mkdir(parents=True, exist_ok=True)
    old_pids = live_pids(gen, dropped)
    seg = Segment(name=Path(seg_dir).name, dir=seg_dir, rows=len(old_pids) + len(add),
                  docs=f"{seg_dir}/{M.DOCS_FILE}", ids=f"{seg_dir}/{IDS_FILE}")
    write_docs(gen, seg, old_pids, add, use_title)
    texts = DocTexts(gen.path(seg.docs))  # what a fresh build of these documents encodes, in pid order
    digests = DocDigests().extend(texts).array()
    settings = build_settings(gen, int(encoder.dim), seg.rows)
    backend = PS.recorded_backend(gen.meta, default_device())
    ledger = BuildLedger(request={"recluster": new.number}, folder=folder)
    ledger.commit()
    started = time.perf_counter()
    with Progress(seg.rows, "re-clustering", unit="docs", enabled=progress) as bar:
        indexer = PlaidIndexer(encoder, texts, digests, folder, ledger, settings, backend, bar, on_stage=on_stage)
        section = indexer.run()
    (folder / LEDGER_FILE).unlink(missing_ok=True)  # build-only files: never part of the generation
    _remove_tree(folder / WORK_DIR)
    seg.plaid = {"chunks": section["chunks"], "num_embeddings": section["num_embeddings"],
                 "ivf_entries": section["ivf_entries"], "num_partitions": section["num_partitions"]}
    codec = {"num_partitions": int(section["num_partitions"]),
             "files": {Path(n).stem: f"{seg_dir}/{PLAID_DIR}/{n}" for n in CODEC_FILES},
             "trained_docs": seg.rows, "added_docs": 0}
    encoded = indexer.encoded_docs
    record = {"reason": reason, "documents": seg.rows, "encoded_docs": encoded,
              "num_partitions": codec["num_partitions"], "seconds": round(time.perf_counter() - started, 3),
              "timings": indexer.timings_record()}
    files = seg.files() + list(codec["files"].values())
    return Reclustered(seg, codec, files, record, encoded, indexer.timings["encode_s"])


def live_pids(gen: Generation, dropped: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Global pids (over ``gen``'s segments) of the live rows, minus the ``dropped`` (segment, local pid)."""
    offsets = np.cumsum([0] + [s.rows for s in gen.segments]).astype(np.int64)
    keep = np.concatenate([gen.live_mask(s) for s in gen.segments]) if gen.segments else np.zeros(0, bool)
    seg_of, local_of = dropped
    keep[offsets[np.asarray(seg_of, np.int64)] + np.asarray(local_of, np.int64)] = False
    return np.flatnonzero(keep).astype(np.int64)


def write_docs(gen: Generation, seg: Segment, old_pids: np.ndarray, add: list[TextRecord], use_title: bool) -> None:
    """The segment's docs.parquet and id table: the kept rows as stored, then the added documents."""
    ids: list[str] = []
    wanted = set(old_pids.tolist())
    with DocTableWriter(gen.path(seg.docs)) as writer:
        pid = 0
        for old in gen.segments:
            fields = segment_fields(gen, old).all_rows()
            local = 0
            for batch_ids, titles, texts in iter_doc_batches(gen.path(old.docs)):
                for doc_id, title, text in zip(batch_ids, titles, texts, strict=True):
                    if pid in wanted:
                        writer.add(doc_id, title, text, fields[local])
                        ids.append(doc_id)
                    pid += 1
                    local += 1
        for r in add:
            writer.add(r.id, r.title if use_title else None, r.text, r.fields)
            ids.append(r.id)
    save_npy(gen.path(seg.ids), id_table(ids))
    seg.fields = f"{seg.dir}/{FIELDS_FILE}" if writer.has_fields else None


def build_settings(gen: Generation, dim: int, num_docs: int) -> PlaidSettings:
    """The settings of a fresh build of ``num_docs`` documents with the index's recorded request."""
    request = gen.meta.get("request") or {}
    defaults = IndexConfig()
    recorded = request.get("index") or {}
    keys = ("nbits", "kmeans_niters", "kmeans_points_per_centroid", "num_partitions", "chunk_size", "seed",
            "batch_size")
    cfg = SimpleNamespace(**{k: recorded.get(k, getattr(defaults, k)) for k in keys})
    engine = request.get("engine") or {}
    return PlaidSettings.resolve(cfg, dim, num_docs, engine.get("sample_docs"), engine.get("kmeans_points_per_centroid"))


def _remove_tree(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
