"""Build the PLAID part of an index: sample -> k-means -> codec -> compressed chunks -> IVF.

- :class:`PlaidIndexer` is the engine. The index builder (embedctl.index.build) runs it inside the build
  folder ``.<name>.building/``; it writes the arrays to ``plaid/``, the k-means sample to ``_work/`` and
  records its stages in the build ledger (embedctl.index.ledger): the plan once the codec is trained, and
  each chunk once its arrays are in place. It returns the ``plaid`` section of ``embedctl_index.json``.
- The one build driver (embedctl.index.build) runs it for ``embedctl index``, ``embedctl.Index.build`` and
  ``build_plaid_index`` (documents and an encoder in memory: tests, bench/plaid_build.py) alike.

Resumable and deterministic: every random choice is seeded, a recorded chunk is never redone, so a run
killed at any point and rerun ends with the same index as an uninterrupted run. Each document's input is
read once before its final encode: the sample's when it is spilled, the others' when their chunk is written;
duplicates are found from the digests computed when the collection was read. Memory stays bounded: documents
are encoded and compressed ``GROUP_DOCS`` at a time; only the compressed arrays of the current chunk (38
bytes per vector at nbits=2, dim=128) and the k-means sample are held.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError, InputError
from embedctl.index import files as fmt
from embedctl.index.docs import duplicate_representatives
from embedctl.index.encoding import default_device, encode_with_progress
from embedctl.index.ledger import (
    WORK_DIR,
    BuildLedger,
    ChunkRecord,
    read_chunk_fragment,
    write_chunk_fragment,
)
from embedctl.index.plaid import codec as codec_mod
from embedctl.index.plaid import kmeans
from embedctl.index.plaid.backends import index_backend
from embedctl.index.plaid.ivf import ranges_index
from embedctl.index.plaid.ivf_stream import write_ivf
from embedctl.index.plaid.reference import Backend
from embedctl.index.plaid.sample import GROUP_DOCS, SampleSpill, float16_rounded, sample_pids
from embedctl.util.io import check_files, file_record, load_npy, save_npy
from embedctl.util.progress import Progress
from embedctl.util.ranks import Ranks


@dataclass(frozen=True)
class PlaidSettings:
    """The resolved settings of one PLAID build (checked before anything is written)."""

    num_docs: int
    dim: int
    nbits: int
    kmeans_niters: int
    num_partitions: int | None  # requested; None: from the sample
    chunk_size: int
    seed: int
    batch_size: int
    sample_docs: int | None  # override of the sample size (tests)
    points_per_centroid: int

    @property
    def num_chunks(self) -> int:
        return (self.num_docs + self.chunk_size - 1) // self.chunk_size

    @classmethod
    def resolve(cls, cfg: Any, dim: int, num_docs: int, sample_docs: int | None = None,
                kmeans_points_per_centroid: int | None = None) -> PlaidSettings:
        if num_docs == 0:
            raise InputError("the collection is empty: nothing to index", hint="check index.collection")
        codec_mod.check_nbits(int(cfg.nbits), int(dim))
        chunk_size = int(cfg.chunk_size or min(25_000, 1 + num_docs))
        if chunk_size < 1:
            raise EmbedctlError(f"`index.chunk_size` = {cfg.chunk_size}: must be >= 1", hint="leave it null")
        per_centroid = kmeans_points_per_centroid
        if per_centroid is None:
            per_centroid = getattr(cfg, "kmeans_points_per_centroid", None)
        per_centroid = int(kmeans.POINTS_PER_CENTROID if per_centroid is None else per_centroid)
        if per_centroid < 1:
            raise EmbedctlError(f"`index.kmeans_points_per_centroid` = {per_centroid}: must be >= 1",
                                hint="leave it at 32, or 256 for faiss's default")
        return cls(num_docs=int(num_docs), dim=int(dim), nbits=int(cfg.nbits), kmeans_niters=int(cfg.kmeans_niters),
                   num_partitions=cfg.num_partitions, chunk_size=chunk_size, seed=int(cfg.seed),
                   batch_size=int(cfg.batch_size), sample_docs=sample_docs, points_per_centroid=per_centroid)


def plaid_backend(cfg: Any, device: str | None = None) -> Backend:
    """The backend of a build: ``index.backend`` / ``index.assign_precision`` on ``device`` (default: a GPU
    when torch sees one, else the CPU)."""
    return index_backend(device or default_device(), str(getattr(cfg, "assign_precision", "auto")),
                         str(getattr(cfg, "backend", "auto")))


class PlaidIndexer:
    """One PLAID build in ``folder`` (its ledger ``ledger``); ``run()`` returns the plaid section.

    ``docs``: a random-access sequence of encoder inputs (pid order); ``digests``: uint8 [N, 16] digests of
    the same (embedctl.index.docs.DocDigests); ``bar``: the progress display (embedctl.util.progress);
    ``on_stage``: called with ``"trained"`` once the codec is in place and ``"chunk-written"`` after each
    chunk (where the re-clustering add's kill -9 tests stop the process)."""

    def __init__(self, encoder: Any, docs: Sequence, digests: np.ndarray, folder: Path, ledger: BuildLedger,
                 settings: PlaidSettings, backend: Backend, bar: Progress, ranks: Ranks | None = None,
                 on_stage: Callable[[str], None] | None = None):
        self.encoder, self.docs, self.digests, self.ledger = encoder, docs, digests, ledger
        self.on_stage = on_stage or (lambda stage: None)
        self.ranks = ranks or Ranks.single()  # several: each rank takes sample groups and chunks (util.ranks)
        self.s, self.backend, self.bar = settings, backend, bar
        self.out = folder / fmt.PLAID_DIR
        self.work = folder / WORK_DIR
        self.n, self.dim = settings.num_docs, settings.dim
        if len(docs) != self.n or len(digests) != self.n:
            raise EmbedctlError(f"{len(docs)} documents and {len(digests)} digests for a build of {self.n}")
        self.sample = sample_pids(self.n, settings.seed, settings.sample_docs)
        self.per_rank: list[dict[str, Any]] = []  # rank 0: every rank's encoding, after the chunks
        self.timings = {"encode_s": 0.0, "kmeans_s": 0.0, "codec_s": 0.0, "compress_s": 0.0, "ivf_s": 0.0}
        self.encoded_docs = 0
        self.resumed_chunks = 0

    # -- stages -------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any] | None:
        """The plaid section (rank 0; None on the other ranks, whose part ends with their chunks).

        Several ranks: each spills the sample groups and writes the chunks it claims; k-means and the codec
        run on rank 0 while the others wait for its plan; rank 0 merges the chunk records and writes the
        IVF. What a chunk or group holds never depends on the rank that does it."""
        self.out.mkdir(parents=True, exist_ok=True)
        spill = SampleSpill(self.work, self.sample)
        plan = self.ledger.plaid_plan
        bar, ranks = self.bar, self.ranks
        todo = plan is None or any(self.finished(i) is None for i in range(self.s.num_chunks))
        stage = ranks.lead_decides("plaid-stage", "train" if plan is None else "chunks" if todo else "ivf")
        if stage != "ivf":  # reuses the spill; fills only missing groups
            spill.fill(self.docs, self.encode, bar.advance, groups=ranks.claims("sample", spill.num_groups))
            ranks.barrier("sample-spilled")  # k-means reads every group; a chunk reads its sampled documents
        else:
            bar.advance(len(self.sample))
        if stage == "train":
            bar.describe("k-means")
            if ranks.is_lead:
                plan = self.train(spill)
                self.on_stage("trained")
                ranks.publish("plaid-plan")
            else:  # no collective: waits while rank 0 lives, however long k-means takes
                ranks.wait_for("plaid-plan")
                self.ledger = BuildLedger.load(self.ledger.folder) or self.ledger
                plan = self.ledger.plaid_plan
        self.check_plan(plan)
        bar.describe("encoding")
        codec = self.load_codec()
        emb_offset = 0
        for i in ranks.claims("chunks", self.s.num_chunks):
            chunk = self.finished(i)
            if chunk is None:
                chunk = self.write_chunk(i, emb_offset, codec, spill)
                self.on_stage("chunk-written")
            else:
                self.resumed_chunks += 1
                bar.advance(chunk.num_passages - self.sample_count(i))
            emb_offset += chunk.num_embeddings  # in order with one rank; finalize recomputes the offsets
        mine = json.dumps({"encode_s": round(self.timings["encode_s"], 3), "encoded_docs": self.encoded_docs})
        shared = ranks.share("chunks-written", mine)  # a barrier that also brings rank 0 every rank's encoding
        if shared is None:
            return None
        self.per_rank = [json.loads(v) for v in shared]
        bar.describe("ivf")
        return self.finalize(plan)

    def encode(self, items: list) -> tuple[np.ndarray, np.ndarray]:
        t = time.perf_counter()
        vecs, doclens = encode_with_progress(self.encoder, items, self.s.batch_size, self.bar)
        self.timings["encode_s"] += time.perf_counter() - t
        self.encoded_docs += len(items)
        vecs = np.asarray(vecs.numpy() if hasattr(vecs, "numpy") else vecs, dtype=np.float32)
        doclens = np.asarray(doclens.numpy() if hasattr(doclens, "numpy") else doclens, dtype=np.int64)
        if vecs.shape != (int(doclens.sum()), self.dim):
            raise EmbedctlError(f"encoder returned vectors {vecs.shape} for doclens summing to {int(doclens.sum())}"
                                f" (dim {self.dim})", hint="the encoder must be a ColBERT model (model.kind=colbert)")
        return vecs, doclens

    def train(self, spill: SampleSpill) -> dict[str, Any]:
        """k-means and the codec on the spilled sample; their arrays, then the plan in the ledger."""
        total = spill.num_embeddings
        if total < 2:
            raise InputError(f"the k-means sample holds {total} token vector(s): too few to train centroids",
                             hint="index a collection with more (or longer) documents")
        avg_doclen_est = float(spill.doclens.mean())
        est = avg_doclen_est * self.n
        rng = np.random.default_rng(self.s.seed + 1)
        h = min(codec_mod.heldout_size(total), total - 1)
        perm = rng.permutation(total)
        heldout_idx, rest = np.sort(perm[:h]), perm[h:]
        k = int(self.s.num_partitions) if self.s.num_partitions else kmeans.num_partitions_for(est, len(rest))
        if k < 1 or k > len(rest):
            raise EmbedctlError(f"`index.num_partitions` = {k}: needs 1..{len(rest)} for this sample",
                                hint="leave index.num_partitions null")
        train_idx = np.sort(rest[:kmeans.kmeans_train_points(total, k, h, self.s.points_per_centroid)])
        del perm, rest
        t = time.perf_counter()
        x = spill.rows(train_idx)
        centroids = kmeans.train_centroids(x, k, niters=self.s.kmeans_niters, seed=self.s.seed,
                                           backend=self.backend)
        del x
        self.timings["kmeans_s"] += time.perf_counter() - t
        t = time.perf_counter()
        codec = codec_mod.train_codec(centroids, spill.rows(heldout_idx), self.s.nbits, backend=self.backend)
        for name, arr in ((fmt.CENTROIDS, codec.centroids), (fmt.AVG_RESIDUAL, codec.avg_residual),
                          (fmt.BUCKET_CUTOFFS, codec.bucket_cutoffs), (fmt.BUCKET_WEIGHTS, codec.bucket_weights)):
            save_npy(self.out / name, arr)
        self.timings["codec_s"] += time.perf_counter() - t
        plan = {"num_chunks": self.s.num_chunks, "chunk_size": self.s.chunk_size, "num_partitions": k,
                "num_embeddings_est": est, "avg_doclen_est": avg_doclen_est, "sample_docs": len(self.sample),
                "sample_embeddings": total, "heldout": int(h), "kmeans_points": int(len(train_idx)),
                "kmeans_niters": self.s.kmeans_niters, "kmeans_points_per_centroid": self.s.points_per_centroid,
                "seed": self.s.seed}
        self.ledger.record_plan(plan)
        return self.ledger.plaid_plan

    def check_plan(self, plan: dict[str, Any]) -> None:
        mine = {"num_chunks": self.s.num_chunks, "chunk_size": self.s.chunk_size, "sample_docs": len(self.sample)}
        if any(plan.get(key) != value for key, value in mine.items()):
            raise EmbedctlError(f"{self.ledger.folder}: the build ledger's PLAID plan does not match this build",
                                hint="pass --overwrite (index.overwrite=true) to start the build over")

    def load_codec(self) -> codec_mod.Codec:
        def load(name: str) -> np.ndarray:
            return load_npy(self.out / name, mmap=False, what="PLAID codec array")

        return codec_mod.Codec(centroids=load(fmt.CENTROIDS), avg_residual=load(fmt.AVG_RESIDUAL),
                               bucket_cutoffs=load(fmt.BUCKET_CUTOFFS), bucket_weights=load(fmt.BUCKET_WEIGHTS),
                               nbits=self.s.nbits)

    def finished(self, i: int) -> ChunkRecord | None:
        """Chunk ``i``'s record when the ledger has one and its arrays are all there (else it is redone)."""
        chunk = self.ledger.finished_chunk(i) or read_chunk_fragment(self.ledger.folder, i)
        if chunk is None or not all((self.out / name).is_file() for name in fmt.plaid_chunk_files(i).values()):
            return None
        if check_files(self.out, chunk.files, full=True):  # changed since it was written: redone, never trusted
            return None
        return chunk

    def sample_count(self, i: int) -> int:
        lo, hi = i * self.s.chunk_size, min(self.n, (i + 1) * self.s.chunk_size)
        return int(np.searchsorted(self.sample, hi) - np.searchsorted(self.sample, lo))

    def write_chunk(self, i: int, emb_offset: int, codec: codec_mod.Codec, spill: SampleSpill) -> ChunkRecord:
        lo, hi = i * self.s.chunk_size, min(self.n, (i + 1) * self.s.chunk_size)
        rep = duplicate_representatives(self.digests[lo:hi])  # local index of the first identical document
        uniq = np.flatnonzero(rep == np.arange(hi - lo))
        nbytes = self.dim * codec.nbits // 8
        pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        for g in range(0, len(uniq), GROUP_DOCS):
            local = uniq[g:g + GROUP_DOCS]
            pids = local + lo
            sidx = np.searchsorted(self.sample, pids)
            in_sample = (sidx < len(self.sample)) & (self.sample[np.minimum(sidx, len(self.sample) - 1)] == pids)
            for mask, from_sample in ((in_sample, True), (~in_sample, False)):
                if not mask.any():
                    continue
                if from_sample:
                    vecs, lens = spill.doc_vectors(sidx[mask])  # float16 values already
                else:
                    vecs, lens = self.encode([self.docs[int(p)] for p in pids[mask]])
                    vecs = float16_rounded(vecs)  # the sample's representation: no dependence on the sample
                t = time.perf_counter()
                codes, packed = codec.compress(vecs, backend=self.backend) if len(vecs) else (
                    np.zeros(0, np.int32), np.zeros((0, nbytes), np.uint8))
                self.timings["compress_s"] += time.perf_counter() - t
                pieces.append((local[mask], lens, codes, packed))
            copies = np.flatnonzero(np.isin(rep, local) & (rep != np.arange(hi - lo))) + lo  # duplicates of these
            self.bar.advance(int(np.count_nonzero(~np.isin(copies, self.sample))))
        codes, packed, doclens = assemble_chunk(pieces, rep, nbytes)
        t = time.perf_counter()
        norms = codec.norms(codes, packed, backend=self.backend)
        self.timings["compress_s"] += time.perf_counter() - t
        files = fmt.plaid_chunk_files(i)
        for name, arr in (("codes", codes), ("residuals", packed), ("norms", norms), ("doclens", doclens)):
            save_npy(self.out / files[name], arr)
        chunk = ChunkRecord(index=i, passage_offset=lo, num_passages=hi - lo, embedding_offset=emb_offset,
                            num_embeddings=int(len(codes)),
                            files={name: file_record(self.out / name) for name in files.values()})
        if self.ranks.world > 1:  # rank 0 owns the ledger: this rank's record is a fragment it merges
            write_chunk_fragment(self.ledger.folder, chunk)
        else:
            self.ledger.record_chunk(chunk)  # from here on the chunk is finished
        return chunk

    def finalize(self, plan: dict[str, Any]) -> dict[str, Any]:
        """The IVF from every chunk's codes, then the plaid section of the index metadata."""
        t = time.perf_counter()
        chunks = [self.finished(i) for i in range(self.s.num_chunks)]
        missing = [i for i, c in enumerate(chunks) if c is None]
        if missing:
            raise EmbedctlError(f"{self.ledger.folder}: chunk(s) {missing[:10]} were not written",
                                hint="rerun the same command to resume the build")
        starts = np.cumsum([0] + [c.num_embeddings for c in chunks])
        chunks = [dataclasses.replace(c, embedding_offset=int(o)) for c, o in zip(chunks, starts, strict=False)]
        if chunks != [self.ledger.finished_chunk(i) for i in range(self.s.num_chunks)]:
            self.ledger.record_chunks(chunks)  # the ranks' fragments, merged: the ledger stays the one record

        def per_chunk():
            for c in chunks:
                files = fmt.plaid_chunk_files(c.index)
                yield (load_npy(self.out / files["codes"]), load_npy(self.out / files["doclens"]), c.passage_offset)

        k = int(plan["num_partitions"])
        entries = write_ivf(per_chunk, k, self.n, self.out / fmt.IVF, self.out / fmt.IVF_LENGTHS)  # streaming
        self.timings["ivf_s"] += time.perf_counter() - t
        num_embeddings = int(sum(c.num_embeddings for c in chunks))
        return {**plan, "num_docs": self.n, "num_embeddings": num_embeddings, "avg_doclen": num_embeddings / self.n,
                "dim": self.dim, "nbits": self.s.nbits, "ivf_entries": entries,
                "chunks": [c.public() for c in chunks]}

    def timings_record(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.timings.items()}

    def run_record(self) -> dict[str, Any]:
        """Resumed chunks and rank 0's encoded documents; with several ranks, each rank's encoding
        (``ranks``: encode_s, encoded_docs per rank, in rank order)."""
        record: dict[str, Any] = {"resumed_chunks": self.resumed_chunks, "encoded_docs": self.encoded_docs}
        if len(self.per_rank) > 1:
            record["ranks"] = self.per_rank
        return record


def assemble_chunk(pieces, rep: np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Put compressed unique documents back in pid order, copying duplicates from their representative."""
    local = np.concatenate([p[0] for p in pieces])
    lens = np.concatenate([np.asarray(p[1], np.int64) for p in pieces])
    codes = np.concatenate([p[2] for p in pieces]).astype(np.int32)
    packed = np.concatenate([p[3] for p in pieces]).reshape(-1, nbytes)
    starts = np.cumsum(lens) - lens
    pos = np.empty(len(rep), dtype=np.int64)
    pos[local] = np.arange(len(local))
    src = pos[rep]
    if np.array_equal(src, np.arange(len(rep))):  # already in pid order, no duplicates
        return codes, packed, lens.astype(np.int32)
    idx = ranges_index(starts[src], lens[src])
    return codes[idx], packed[idx], lens[src].astype(np.int32)
