"""Build a PLAID (ColBERTv2) index: sample -> k-means -> codec -> compressed chunks -> IVF -> metadata.

Resumable and deterministic: the plan, the sample spill and each chunk are written under temp names then
renamed, a finished chunk (its ``{i}.metadata.json`` exists) is never redone, and every random choice is
seeded, so a run killed at any point and rerun ends with the same index as an uninterrupted run.
Memory stays bounded: documents are encoded and compressed ``GROUP_DOCS`` at a time; only the compressed
arrays of the current chunk (36 bytes per vector at nbits=2, dim=128) and the k-means sample are held.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError, InputError
from embedctl.index.plaid import codec as codec_mod
from embedctl.index.plaid import format as fmt
from embedctl.index.plaid import kmeans
from embedctl.index.plaid.backends import index_backend
from embedctl.index.plaid.ivf import build_ivf, ranges_index
from embedctl.index.plaid.progress import DocProgress
from embedctl.index.plaid.sample import GROUP_DOCS, SampleSpill, sample_pids, save_npy
from embedctl.util import atomic


def build_plaid_index(encoder: Any, docs: Sequence[str] | Sequence[Sequence[int]] | Iterable, out_dir: str | Path,
                      index_cfg: Any, *, progress: bool = True, extra_metadata: dict | None = None,
                      sample_docs: int | None = None, device: str | None = None,
                      kmeans_points_per_centroid: int | None = None) -> dict[str, Any]:
    """Encode ``docs`` (texts or token-id lists; pid = position 0..N-1) and write a PLAID index to ``out_dir``.

    ``encoder``: has ``dim`` and ``encode_documents(items, batch_size=...) -> (vectors [sum(doclens), dim],
    doclens [n])`` (embedctl.models.encoder.Encoder with kind colbert). ``index_cfg``: an IndexConfig
    (nbits, kmeans_niters, num_partitions, chunk_size, batch_size, seed, overwrite). ``sample_docs``
    overrides the k-means sample size (tests); ``kmeans_points_per_centroid`` caps k-means training vectors
    (default ``index_cfg.kmeans_points_per_centroid``, else ``kmeans.POINTS_PER_CENTROID``). Returns a summary dict (sizes, timings, resumed chunks).

    >>> build_plaid_index(enc, ["a text", "another"], "indexes/x", IndexConfig(nbits=2))["num_docs"]  # doctest: +SKIP
    2
    """
    builder = _Builder(encoder, docs, Path(out_dir), index_cfg, progress, extra_metadata or {}, sample_docs, device)
    per_centroid = kmeans_points_per_centroid
    if per_centroid is None:
        per_centroid = getattr(index_cfg, "kmeans_points_per_centroid", None)
    builder.points_per_centroid = int(kmeans.POINTS_PER_CENTROID if per_centroid is None else per_centroid)
    if builder.points_per_centroid < 1:
        raise EmbedctlError(f"`index.kmeans_points_per_centroid` = {builder.points_per_centroid}: must be >= 1",
                            hint="leave it at 32, or 256 for faiss's default")
    return builder.run()


def collection_digest(docs: Sequence) -> str:
    """sha256 over the documents in order (texts as UTF-8, token lists as int64), to refuse a foreign resume."""
    h = hashlib.sha256()
    for d in docs:
        if isinstance(d, str):
            h.update(d.encode("utf-8"))
        else:
            h.update(np.asarray(d, dtype=np.int64).tobytes())
        h.update(b"\x00\x1e")
    return h.hexdigest()


def model_identity(encoder: Any) -> dict[str, Any]:
    """What identifies the encoder: its effective model settings and tokenizer fingerprint when available."""
    out: dict[str, Any] = {"dim": int(encoder.dim), "kind": getattr(encoder, "kind", None)}
    cfg = getattr(encoder, "model_cfg", None)
    if cfg is not None:
        import dataclasses

        out["model_cfg"] = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)
    tok = getattr(encoder, "tokenizer", None)
    if tok is not None and hasattr(tok, "fingerprint"):
        out["tokenizer"] = tok.fingerprint()
    return out


class _Builder:
    def __init__(self, encoder, docs, out: Path, cfg, progress, extra, sample_docs, device):
        self.encoder, self.out, self.cfg, self.progress, self.extra = encoder, out, cfg, progress, extra
        self.docs = docs if isinstance(docs, Sequence) else list(docs)
        self.n = len(self.docs)
        if self.n == 0:
            raise InputError("the collection is empty: nothing to index", hint="check index.collection")
        self.dim = int(encoder.dim)
        codec_mod.check_nbits(int(cfg.nbits), self.dim)
        self.device = device or _default_device()
        self.chunk_size = int(cfg.chunk_size or min(25_000, 1 + self.n))
        if self.chunk_size < 1:
            raise EmbedctlError(f"`index.chunk_size` = {cfg.chunk_size}: must be >= 1", hint="leave it null")
        self.num_chunks = (self.n + self.chunk_size - 1) // self.chunk_size
        self.sample = sample_pids(self.n, int(cfg.seed), sample_docs)
        self.timings = {"encode_s": 0.0, "kmeans_s": 0.0, "codec_s": 0.0, "compress_s": 0.0, "ivf_s": 0.0}
        self.encoded_docs = 0
        self.points_per_centroid = kmeans.POINTS_PER_CENTROID
        self.backend = index_backend(self.device, str(getattr(cfg, "assign_precision", "auto")),
                                     str(getattr(cfg, "backend", "auto")))
        self.precision = self.backend.precision

    # -- identity and resume ------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """Settings that must match to resume (JSON-normalised, so it compares equal to what was saved)."""
        import json

        c = self.cfg
        return json.loads(json.dumps({"format": fmt.FORMAT_NAME, "format_version": fmt.FORMAT_VERSION, "num_docs": self.n,
                "collection_sha256": collection_digest(self.docs), "dim": self.dim, "nbits": int(c.nbits),
                "kmeans_niters": int(c.kmeans_niters), "num_partitions_requested": c.num_partitions,
                "chunk_size": self.chunk_size, "seed": int(c.seed), "sample_docs": len(self.sample),
                "kmeans_points_per_centroid": self.points_per_centroid, "assign_precision": self.precision, "backend": self.backend.describe(),
                "model": model_identity(self.encoder)}, sort_keys=True, default=str))

    def prepare_dir(self, ident: dict[str, Any]) -> str:
        """'complete' | 'resume' | 'fresh'; wipes PLAID files on overwrite, refuses a foreign resume."""
        self.out.mkdir(parents=True, exist_ok=True)
        existing = None
        for name in (fmt.METADATA, fmt.PLAN):
            if (self.out / name).is_file():
                existing = (name, fmt.read_json(self.out / name))
                break
        if existing is None and (self.out / fmt.WORK / "identity.json").is_file():
            existing = ("work", fmt.read_json(self.out / fmt.WORK / "identity.json"))
        if existing is not None and bool(getattr(self.cfg, "overwrite", False)):
            remove_plaid_files(self.out)
            existing = None
        if existing is None:
            return "fresh"
        if existing[1].get("identity") != ident:
            raise EmbedctlError(
                f"{self.out} holds a PLAID index (or an unfinished one) built from another collection or settings",
                hint="set index.overwrite=true to replace it, or choose another index.name")
        return "complete" if existing[0] == fmt.METADATA else "resume"

    # -- phases ---------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        ident = self.identity()
        state = self.prepare_dir(ident)
        if state == "complete":
            meta = fmt.read_json(self.out / fmt.METADATA)
            return self.summary(meta, t0, resumed_chunks=meta["num_chunks"], already_complete=True)
        work = self.out / fmt.WORK
        work.mkdir(parents=True, exist_ok=True)
        atomic.write_json(work / "identity.json", {"identity": ident})
        spill = SampleSpill(work, self.sample)
        with DocProgress(self.n, "encoding", self.progress) as bar:
            plan = fmt.read_json(self.out / fmt.PLAN) if (self.out / fmt.PLAN).is_file() else None
            if plan is None:
                spill.fill(self.docs, self.encode, bar.advance)
                bar.describe("k-means")
                plan = self.train(spill, ident)
            elif not all((self.out / fmt.chunk_files(i)["metadata"]).is_file() for i in range(self.num_chunks)):
                spill.fill(self.docs, self.encode, bar.advance)  # reuses the spill; refills only lost groups
            else:
                bar.advance(len(self.sample))
            bar.describe("encoding")
            codec = self.load_codec(plan)
            resumed = 0
            emb_offset = 0
            for i in range(self.num_chunks):
                done = self.out / fmt.chunk_files(i)["metadata"]
                if done.is_file():
                    cm = fmt.read_json(done)
                    resumed += 1
                    bar.advance(cm["num_passages"] - self.sample_count(i))
                else:
                    cm = self.write_chunk(i, emb_offset, codec, spill, bar)
                emb_offset += cm["num_embeddings"]
        meta = self.finalize(plan, ident)
        shutil.rmtree(work, ignore_errors=True)
        return self.summary(meta, t0, resumed_chunks=resumed)

    def encode(self, items: list) -> tuple[np.ndarray, np.ndarray]:
        t = time.perf_counter()
        vecs, doclens = self.encoder.encode_documents(items, batch_size=int(self.cfg.batch_size))
        self.timings["encode_s"] += time.perf_counter() - t
        self.encoded_docs += len(items)
        vecs = np.asarray(vecs.numpy() if hasattr(vecs, "numpy") else vecs, dtype=np.float32)
        doclens = np.asarray(doclens.numpy() if hasattr(doclens, "numpy") else doclens, dtype=np.int64)
        if vecs.shape != (int(doclens.sum()), self.dim):
            raise EmbedctlError(f"encoder returned vectors {vecs.shape} for doclens summing to {int(doclens.sum())}"
                                f" (dim {self.dim})", hint="the encoder must be a ColBERT model (model.kind=colbert)")
        return vecs, doclens

    def train(self, spill: SampleSpill, ident: dict[str, Any]) -> dict[str, Any]:
        total = spill.num_embeddings
        if total < 2:
            raise InputError(f"the k-means sample holds {total} token vector(s): too few to train centroids",
                             hint="index a collection with more (or longer) documents")
        avg_doclen_est = float(spill.doclens.mean())
        est = avg_doclen_est * self.n
        rng = np.random.default_rng(int(self.cfg.seed) + 1)
        h = min(codec_mod.heldout_size(total), total - 1)
        perm = rng.permutation(total)
        heldout_idx, rest = np.sort(perm[:h]), perm[h:]
        k = int(self.cfg.num_partitions) if self.cfg.num_partitions else kmeans.num_partitions_for(est, len(rest))
        if k < 1 or k > len(rest):
            raise EmbedctlError(f"`index.num_partitions` = {k}: needs 1..{len(rest)} for this sample",
                                hint="leave index.num_partitions null")
        train_idx = np.sort(rest[:kmeans.kmeans_train_points(total, k, h, self.points_per_centroid)])
        del perm, rest
        t = time.perf_counter()
        x = spill.rows(train_idx)
        centroids = kmeans.train_centroids(x, k, niters=int(self.cfg.kmeans_niters), seed=int(self.cfg.seed),
                                           backend=self.backend)
        del x
        self.timings["kmeans_s"] += time.perf_counter() - t
        t = time.perf_counter()
        codec = codec_mod.train_codec(centroids, spill.rows(heldout_idx), int(self.cfg.nbits), backend=self.backend)
        for name, arr in ((fmt.CENTROIDS, codec.centroids), (fmt.AVG_RESIDUAL, codec.avg_residual),
                          (fmt.BUCKET_CUTOFFS, codec.bucket_cutoffs), (fmt.BUCKET_WEIGHTS, codec.bucket_weights)):
            save_npy(self.out / name, arr)
        self.timings["codec_s"] += time.perf_counter() - t
        plan = {"identity": ident, "num_chunks": self.num_chunks, "chunk_size": self.chunk_size,
                "num_partitions": k, "num_embeddings_est": est, "avg_doclen_est": avg_doclen_est,
                "sample_docs": len(self.sample), "sample_embeddings": total, "heldout": int(h),
                "kmeans_points": int(len(train_idx))}
        atomic.write_json(self.out / fmt.PLAN, plan)
        return plan

    def load_codec(self, plan: dict[str, Any]) -> codec_mod.Codec:
        return codec_mod.Codec(
            centroids=fmt.load_npy(self.out / fmt.CENTROIDS, mmap=False),
            avg_residual=fmt.load_npy(self.out / fmt.AVG_RESIDUAL, mmap=False),
            bucket_cutoffs=fmt.load_npy(self.out / fmt.BUCKET_CUTOFFS, mmap=False),
            bucket_weights=fmt.load_npy(self.out / fmt.BUCKET_WEIGHTS, mmap=False), nbits=int(self.cfg.nbits))

    def sample_count(self, i: int) -> int:
        lo, hi = i * self.chunk_size, min(self.n, (i + 1) * self.chunk_size)
        return int(np.searchsorted(self.sample, hi) - np.searchsorted(self.sample, lo))

    def write_chunk(self, i: int, emb_offset: int, codec: codec_mod.Codec, spill: SampleSpill, bar) -> dict:
        lo, hi = i * self.chunk_size, min(self.n, (i + 1) * self.chunk_size)
        rep = duplicate_representatives(self.docs, lo, hi)  # local index of the first identical document
        uniq = np.flatnonzero(rep == np.arange(hi - lo))
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
                    vecs, lens = spill.doc_vectors(sidx[mask])
                else:
                    vecs, lens = self.encode([self.docs[int(p)] for p in pids[mask]])
                t = time.perf_counter()
                codes, packed = codec.compress(vecs, backend=self.backend) if len(vecs) else (
                    np.zeros(0, np.int32), np.zeros((0, self.dim * codec.nbits // 8), np.uint8))
                self.timings["compress_s"] += time.perf_counter() - t
                pieces.append((local[mask], lens, codes, packed))
            covered = np.flatnonzero(np.isin(rep, local)) + lo  # these docs and their duplicates
            bar.advance(int(np.count_nonzero(~np.isin(covered, self.sample))))
        codes, packed, doclens = assemble_chunk(pieces, rep, codec.dim * codec.nbits // 8)
        t = time.perf_counter()
        norms = codec.norms(codes, packed, backend=self.backend)
        self.timings["compress_s"] += time.perf_counter() - t
        files = fmt.chunk_files(i)
        save_npy(self.out / files["codes"], codes)
        save_npy(self.out / files["residuals"], packed)
        save_npy(self.out / files["norms"], norms)
        save_npy(self.out / files["doclens"], doclens)
        meta = {"passage_offset": lo, "num_passages": hi - lo, "embedding_offset": emb_offset,
                "num_embeddings": int(len(codes))}
        atomic.write_json(self.out / files["metadata"], meta)
        return meta

    def finalize(self, plan: dict[str, Any], ident: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        chunks = [fmt.read_json(self.out / fmt.chunk_files(i)["metadata"]) for i in range(self.num_chunks)]

        def per_chunk():
            for i, cm in enumerate(chunks):
                files = fmt.chunk_files(i)
                yield (fmt.load_npy(self.out / files["codes"]), fmt.load_npy(self.out / files["doclens"]),
                       cm["passage_offset"])

        k = int(plan["num_partitions"])
        ivf, lengths = build_ivf(per_chunk(), k, self.n)
        save_npy(self.out / fmt.IVF, ivf)
        save_npy(self.out / fmt.IVF_LENGTHS, lengths)
        self.timings["ivf_s"] += time.perf_counter() - t
        num_embeddings = int(sum(c["num_embeddings"] for c in chunks))
        meta = {"format": fmt.FORMAT_NAME, "format_version": fmt.FORMAT_VERSION, "identity": ident,
                "num_docs": self.n, "num_chunks": self.num_chunks, "chunk_size": self.chunk_size,
                "num_partitions": k, "num_embeddings": num_embeddings, "avg_doclen": num_embeddings / self.n,
                "dim": self.dim, "nbits": int(self.cfg.nbits), "ivf_entries": int(len(ivf)),
                "chunks": chunks, "extra": self.extra}
        atomic.write_json(self.out / fmt.METADATA, meta)
        return meta

    def summary(self, meta: dict[str, Any], t0: float, resumed_chunks: int, already_complete: bool = False) -> dict:
        size = sum(p.stat().st_size for p in self.out.iterdir() if p.is_file() and is_plaid_file(p.name))
        ne = max(1, meta["num_embeddings"])
        return {"index_dir": str(self.out), "num_docs": meta["num_docs"], "num_chunks": meta["num_chunks"],
                "num_partitions": meta["num_partitions"], "num_embeddings": meta["num_embeddings"],
                "avg_doclen": meta["avg_doclen"], "nbits": meta["nbits"], "dim": meta["dim"],
                "bytes": size, "bytes_per_vector": size / ne, "resumed_chunks": resumed_chunks,
                "already_complete": already_complete, "encoded_docs": self.encoded_docs,
                "timings": {**self.timings, "total_s": time.perf_counter() - t0}}


def duplicate_representatives(docs: Sequence, lo: int, hi: int) -> np.ndarray:
    """For documents lo..hi-1: local index of the first identical document in the chunk (itself if new)."""
    first: dict[Any, int] = {}
    rep = np.empty(hi - lo, dtype=np.int64)
    for j in range(hi - lo):
        d = docs[lo + j]
        key = d if isinstance(d, str) else tuple(int(x) for x in d)
        rep[j] = first.setdefault(key, j)
    return rep


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


def is_plaid_file(name: str) -> bool:
    fixed = {fmt.PLAN, fmt.METADATA, fmt.CENTROIDS, fmt.AVG_RESIDUAL, fmt.BUCKET_CUTOFFS, fmt.BUCKET_WEIGHTS,
             fmt.IVF, fmt.IVF_LENGTHS}
    if name in fixed:
        return True
    head = name.split(".")[0]
    return (head.isdigit() and name.endswith((".codes.npy", ".residuals.npy", ".norms.npy", ".metadata.json"))) or (
        name.startswith("doclens.") and name.endswith(".npy"))


def remove_plaid_files(out: Path) -> None:
    """Delete this format's files (and the work folder) only; other files in the folder are kept."""
    shutil.rmtree(out / fmt.WORK, ignore_errors=True)
    for p in out.iterdir():
        if p.is_file() and (is_plaid_file(p.name) or (p.name.startswith(".") and p.name.endswith(".tmp"))):
            p.unlink()


def _default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover
        return "cpu"
