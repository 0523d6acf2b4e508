"""A PLAID add that re-clusters: new centroids and buckets for every live document and the new ones.

An add normally compresses the new documents with the index's codec, trained on the documents of the
build. When the codec has seen too few of the documents it serves, that costs quality: a 480-document
SciFact index grown by 480 more scored nDCG@10 0.019 below a fresh build of the 960 (bench/grow_vs_fresh.py).
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

What is kept to do so: each segment's ``docs.parquet`` holds every document's text (and title when the
build used titles), so ``index.recluster_from=texts`` (default) re-encodes exactly what a fresh build
would: the result is a fresh build of those documents, byte for byte. ``codes`` decompresses the stored
codes and residuals of the indexed documents instead (no encoding; the vectors are the compressed
approximations) and encodes only the new ones.

Kill -9 safe like every change: everything is written under ``segments/g<N>/`` before the commit (the
engine's ledger and k-means sample under it are build-only files, collected after the commit), a killed
run's files are collected by the next writer, and every step is seeded: a rerun writes the same bytes.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from embedctl.config.sections.index import IndexConfig
from embedctl.data.sources import TextRecord
from embedctl.errors import ConfigError
from embedctl.index import meta as M
from embedctl.index import plaid_segments as PS
from embedctl.index.collection import DocTexts
from embedctl.index.docs import DocDigests, DocTableWriter, iter_doc_batches
from embedctl.index.generations import IDS_FILE, PLAID_DIR, Generation, Segment, segment_dir
from embedctl.index.idtable import id_table
from embedctl.index.ledger import LEDGER_FILE, WORK_DIR, BuildLedger
from embedctl.index.plaid.ivf import ranges_index
from embedctl.index.plaid_files import CODEC_FILES, gather_vectors, open_plaid
from embedctl.index.plaid_indexer import PlaidIndexer, PlaidSettings, default_device
from embedctl.util.io import save_npy
from embedctl.util.progress import Progress

RECLUSTER_FROM = ("texts", "codes")


def codec_counts(gen: Generation) -> tuple[int, int]:
    """(documents the generation's codec was trained on, documents added with it since). A commit written
    before these were recorded: the build's documents, and every row beyond them."""
    codec = gen.codec or {}
    trained = int(codec.get("trained_docs", gen.meta["num_docs"]))
    added = int(codec.get("added_docs", max(0, gen.rows - trained)))
    return trained, added


def recluster_reason(gen: Generation, num_add: int, below_docs: int, add_ratio: float | None) -> str | None:
    """Why an add of ``num_add`` documents to ``gen`` re-clusters (a sentence naming the rule), or None."""
    if gen.kind != "plaid":
        return None
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
              use_title: bool, encoder: Any, source: str, reason: str, progress: bool,
              on_stage: Callable[[str], None]) -> Reclustered:
    """Write generation ``new``'s one segment: the live documents of ``gen`` (minus the rows ``dropped``:
    (segment index, local pid) of the documents this add replaces) then ``add``, re-clustered."""
    if source not in RECLUSTER_FROM:
        raise ConfigError([f"`index.recluster_from` = {source!r}: expected one of {', '.join(RECLUSTER_FROM)}"])
    seg_dir = segment_dir(new.number)
    folder = gen.index_dir / seg_dir
    folder.mkdir(parents=True, exist_ok=True)
    old_pids = live_pids(gen, dropped)
    seg = Segment(name=Path(seg_dir).name, dir=seg_dir, rows=len(old_pids) + len(add),
                  docs=f"{seg_dir}/{M.DOCS_FILE}", ids=f"{seg_dir}/{IDS_FILE}")
    write_docs(gen, seg, old_pids, add, use_title)
    texts = DocTexts(gen.path(seg.docs))  # what a fresh build of these documents encodes, in pid order
    digests = DocDigests().extend(texts).array()
    items: Sequence = texts
    if source == "codes":
        encoder = StoredVectors(gen, old_pids, encoder)
        items = _Items(len(old_pids), texts)
    settings = build_settings(gen, int(encoder.dim), seg.rows)
    backend = PS.recorded_backend(gen.meta, default_device())
    ledger = BuildLedger(request={"recluster": new.number}, folder=folder)
    ledger.commit()
    started = time.perf_counter()
    with Progress(seg.rows, "re-clustering", unit="docs", enabled=progress) as bar:
        indexer = PlaidIndexer(encoder, items, digests, folder, ledger, settings, backend, bar, on_stage=on_stage)
        section = indexer.run()
    (folder / LEDGER_FILE).unlink(missing_ok=True)  # build-only files: never part of the generation
    _remove_tree(folder / WORK_DIR)
    seg.plaid = {"chunks": section["chunks"], "num_embeddings": section["num_embeddings"],
                 "ivf_entries": section["ivf_entries"], "num_partitions": section["num_partitions"]}
    codec = {"num_partitions": int(section["num_partitions"]),
             "files": {Path(n).stem: f"{seg_dir}/{PLAID_DIR}/{n}" for n in CODEC_FILES},
             "trained_docs": seg.rows, "added_docs": 0}
    encoded = indexer.encoded_docs - (len(old_pids) if source == "codes" else 0)
    record = {"reason": reason, "from": source, "documents": seg.rows, "encoded_docs": encoded,
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
            for batch_ids, titles, texts in iter_doc_batches(gen.path(old.docs)):
                for doc_id, title, text in zip(batch_ids, titles, texts, strict=True):
                    if pid in wanted:
                        writer.add(doc_id, title, text)
                        ids.append(doc_id)
                    pid += 1
        for r in add:
            writer.add(r.id, r.title if use_title else None, r.text)
            ids.append(r.id)
    save_npy(gen.path(seg.ids), id_table(ids))


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


class StoredVectors:
    """An encoder for ``recluster_from=codes``: the indexed documents' vectors decompressed from their codes
    and residuals (item: an int, the document's position among the kept ones), the new ones encoded."""

    def __init__(self, gen: Generation, old_pids: np.ndarray, encoder: Any):
        self.arrays = open_plaid(gen)
        self.codec = PS.load_codec(gen)
        self.old_pids, self.encoder = old_pids, encoder
        self.dim = int(encoder.dim)
        self.offsets = np.concatenate([[0], np.cumsum(self.arrays.doclens)]).astype(np.int64)

    def encode_documents(self, items: list, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        stored = [i for i, item in enumerate(items) if not isinstance(item, str)]
        texts = [i for i, item in enumerate(items) if isinstance(item, str)]
        vecs: list[np.ndarray | None] = [None] * len(items)
        if stored:
            pids = self.old_pids[[int(items[i]) for i in stored]]
            order = np.argsort(pids, kind="stable")  # gather reads sorted vector indices
            lens = self.arrays.doclens[pids[order]]
            codes, packed, _ = gather_vectors(self.arrays, ranges_index(self.offsets[pids[order]], lens))
            flat = self.codec.decompress(codes, packed)
            for j, part in zip(order, np.split(flat, np.cumsum(lens)[:-1]), strict=True):
                vecs[stored[int(j)]] = part
        if texts:
            out, lens = self.encoder.encode_documents([items[i] for i in texts], batch_size=batch_size)
            out = np.asarray(out.numpy() if hasattr(out, "numpy") else out, np.float32).reshape(-1, self.dim)
            lens = np.asarray(lens.numpy() if hasattr(lens, "numpy") else lens, np.int64)
            for i, part in zip(texts, np.split(out, np.cumsum(lens)[:-1]), strict=True):
                vecs[i] = part
        doclens = np.asarray([len(v) for v in vecs], np.int64)
        return (np.concatenate(vecs) if vecs else np.zeros((0, self.dim), np.float32)), doclens


class _Items(Sequence):
    """Items of a ``codes`` re-cluster: the kept documents as their position (int), the added ones as text."""

    def __init__(self, num_old: int, texts: Sequence[str]):
        self.num_old, self.texts = num_old, texts

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        return i if i < self.num_old else self.texts[i]


def _remove_tree(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
