"""`embedctl index` on several ranks (torchrun, srun, a PyTorchJob): what the ranks other than 0 do, and
the dense build's chunk plan.

Rank 0 runs the build driver (embedctl.index.build): it holds the writer lock and the build ledger, writes
``docs.parquet`` and the digests, then publishes ``prepared`` (the build folder and the kind). Every other
rank loads the encoder meanwhile, waits for ``prepared`` (through the store: embedctl.util.ranks), and
joins the encoding:

- PLAID: :class:`~embedctl.index.plaid_indexer.PlaidIndexer` with the ranks: sample groups and chunks
  claimed from a shared counter, chunk records written as fragments that rank 0 merges;
- dense: :func:`dense_build`: chunk ``k`` is documents ``[k * 512, (k + 1) * 512)``; each rank encodes
  the chunks it claims into ``_work/dense/{k}.npy``; rank 0 adds them to the faiss index in chunk order
  (an IVF trains on a document-seeded sample: faiss draws at most 256 vectors per list from them in
  document order, seeded by ``index.seed``).

Nothing a chunk holds depends on the rank that made it, so 1, 2 or N ranks write the same bytes, and a
build killed with N ranks resumes with M. Every rank needs the build folder: across nodes, ``index.root``
must be on a shared filesystem.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index.collection import open_collection
from embedctl.index.dense import DenseBuilder
from embedctl.index.files import DENSE_WORK, DIGESTS_FILE
from embedctl.index.ledger import BuildLedger, describe_backend, normalized
from embedctl.index.plaid_indexer import PlaidIndexer, PlaidSettings, encode_with_progress, plaid_backend
from embedctl.models.encoder import load_encoder
from embedctl.util.io import load_npy, save_npy
from embedctl.util.progress import Progress
from embedctl.util.ranks import Ranks

DENSE_CHUNK = 512  # documents per dense chunk (and per encode call): fixed, never from the number of ranks


def prepared_message(folder: Path, final: Path, kind: str) -> str:
    """What rank 0 publishes once the build folder, the documents and the ledger are ready."""
    return json.dumps({"folder": str(folder), "final": str(final), "kind": kind})


def follow_build(loaded: Any, ranks: Ranks) -> dict[str, Any]:
    """A rank other than 0: encode (and, for PLAID, compress) the chunks it claims; returns once rank 0 is done."""
    started = time.perf_counter()
    cfg = loaded.cfg
    icfg = cfg.index
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    encoder = load_encoder(cfg.model)  # while rank 0 reads the collection
    info = json.loads(ranks.wait_for("prepared"))
    folder, kind = Path(info["folder"]), info["kind"]
    if kind in ("plaid", "dense"):
        ledger = BuildLedger.load(folder)
        if ledger is None or ledger.documents is None:
            raise EmbedctlError(f"rank {ranks.rank}: {folder} holds no build ledger with documents",
                                hint="every rank must see index.root: put it on a filesystem all nodes share")
        num_docs = int(ledger.documents["num_docs"])
        collection = open_collection(icfg.collection, icfg.use_title)
        with Progress(num_docs, f"rank {ranks.rank}", unit="docs", enabled=False) as bar:
            if kind == "plaid":
                backend = plaid_backend(icfg)
                if normalized(backend.describe()) != ledger.backend:
                    raise EmbedctlError(f"rank {ranks.rank} computes on backend {describe_backend(backend.describe())}, "
                                        f"rank 0 on {describe_backend(ledger.backend)}: their bytes would differ",
                                        hint="set index.backend and index.assign_precision so every node picks the same")
                digests = np.asarray(load_npy(folder / DIGESTS_FILE, mmap=False, what="document digests"))
                settings = PlaidSettings.resolve(icfg, encoder.dim, num_docs)
                PlaidIndexer(encoder, collection.plaid_items(folder), digests, folder, ledger, settings, backend, bar,
                             ranks).run()
            else:
                dense_build(encoder, collection, folder, icfg, bar, ranks)
    ranks.wait_for("done")
    return {"index": info["final"], "kind": kind, "rank": ranks.rank, "world": ranks.world,
            "model": cfg.model.name_or_path, "seconds": round(time.perf_counter() - started, 2)}


def dense_build(encoder: Any, collection: Any, folder: Path, icfg: Any, bar: Progress, ranks: Ranks
                ) -> tuple[DenseBuilder, int] | None:
    """Encode the dense chunks this rank claims; on rank 0, then, a DenseBuilder holding every chunk in order.

    One rank encodes each chunk straight into the builder (reusing ``_work/dense`` files a killed run of
    several ranks left); several write each chunk's vectors to ``_work/dense/{k}.npy`` first (temp name +
    rename: a file present is a chunk finished). Returns (builder, documents encoded here) on rank 0."""
    items = collection.plaid_items(folder)
    n = len(items)
    num_chunks = (n + DENSE_CHUNK - 1) // DENSE_CHUNK
    work = folder / DENSE_WORK
    builder = DenseBuilder(encoder.dim, icfg.dense_type, nlist=icfg.ivf_nlist, hnsw_m=icfg.hnsw_m,
                           hnsw_ef_construction=icfg.hnsw_ef_construction, seed=icfg.seed) if ranks.is_lead else None
    encoded = 0

    def path(k: int) -> Path:
        return work / f"{k:06d}.npy"

    def encode(k: int) -> np.ndarray:
        nonlocal encoded
        part = items[k * DENSE_CHUNK:min(n, (k + 1) * DENSE_CHUNK)]
        encoded += len(part)
        return np.asarray(encode_with_progress(encoder, part, icfg.batch_size, bar), dtype=np.float32)

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
