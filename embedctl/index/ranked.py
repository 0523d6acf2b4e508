"""`embedctl index` on several ranks (torchrun, srun, a PyTorchJob): what the ranks other than 0 do.

Rank 0 runs the build driver (embedctl.index.build): it holds the writer lock and the build ledger, writes
``docs.parquet`` and the digests, then publishes ``prepared`` (the build folder and the kind). Every other
rank loads the encoder meanwhile, waits for ``prepared`` (through the store: embedctl.util.ranks), and
joins the encoding through its kind's ``follow`` (embedctl.index.kinds):

- PLAID: :class:`~embedctl.index.plaid_indexer.PlaidIndexer` with the ranks: sample groups and chunks
  claimed from a shared counter, chunk records written as fragments that rank 0 merges;
- dense: chunks of 512 documents claimed the same way (embedctl.index.kinds.dense).

Nothing a chunk holds depends on the rank that made it, so 1, 2 or N ranks write the same bytes, and a
build killed with N ranks resumes with M. Every rank needs the build folder: across nodes, ``index.root``
must be on a shared filesystem.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError
from embedctl.index.kinds import KINDS, BuildJob
from embedctl.index.ledger import BuildLedger
from embedctl.util.progress import Progress
from embedctl.util.ranks import Ranks


def prepared_message(folder: Path, final: Path, kind: str) -> str:
    """What rank 0 publishes once the build folder, the documents and the ledger are ready: the kind's
    name, or ``complete`` when there is nothing left for the other ranks."""
    return json.dumps({"folder": str(folder), "final": str(final), "kind": kind})


def follow_build(inputs: Any, ranks: Ranks) -> dict[str, Any]:
    """A rank other than 0 of a build (``inputs``: embedctl.index.build.BuildInputs): encode (and, for PLAID,
    compress) the chunks it claims; returns once rank 0 is done."""
    started = time.perf_counter()
    encoder = inputs.load_encoder()  # while rank 0 reads the collection
    info = json.loads(ranks.wait_for("prepared"))
    folder, name = Path(info["folder"]), info["kind"]
    if name in KINDS:  # otherwise "complete": rank 0 found nothing left to encode
        ledger = BuildLedger.load(folder)
        if ledger is None or ledger.documents is None:
            raise EmbedctlError(f"rank {ranks.rank}: {folder} holds no build ledger with documents",
                                hint="every rank must see index.root: put it on a filesystem all nodes share")
        ledger.keep_encode_backend(encoder)  # rank 0's choice (a resumed build keeps the one it started with)
        icfg = ledger.keep_assign_precision(inputs.icfg)  # likewise rank 0's assignment arithmetic
        collection = inputs.open_collection()
        with Progress(int(ledger.documents["num_docs"]), f"rank {ranks.rank}", unit="docs", enabled=False) as bar:
            KINDS[name].follow(BuildJob(encoder, collection, folder, icfg, ledger, None, bar, ranks, inputs.engine))
    ranks.wait_for("done")
    return {"index": info["final"], "kind": name, "rank": ranks.rank, "world": ranks.world,
            "model": inputs.model_name, "seconds": round(time.perf_counter() - started, 2)}
