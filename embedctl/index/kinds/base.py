"""The seam every index kind implements: what the one build driver, the one add/delete path and the one
compact path call, so that none of them knows which kind it drives.

A kind writes segments (the build's base segment, one per add, one per compact) and describes them in the
``<kind>`` section of a segment; everything around them (documents, id tables, tombstones, commits, the
writer lock, the ledger) is the same for every kind and lives outside. Retrievers are the search
package's (embedctl.search.retrievers: one per kind, keyed by :attr:`IndexKind.name`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.index.generations import Generation, Segment
from embedctl.index.ledger import BuildLedger
from embedctl.util.progress import Progress
from embedctl.util.ranks import Ranks

Failpoint = Callable[[str], None]


@dataclass
class BuildJob:
    """One build of the base segment in the build folder: the encoder, the collection (its encoder inputs
    in pid order: ``collection.plaid_items(folder)``), the index settings, the ledger, the documents'
    digests (uint8 [N, 16]), the progress bar and the ranks taking part."""

    encoder: Any
    collection: Any
    folder: Path
    icfg: Any
    ledger: BuildLedger
    digests: np.ndarray | None
    bar: Progress
    ranks: Ranks
    engine: dict[str, Any] = field(default_factory=dict)
    """Engine overrides of tests and benches (PLAID: sample_docs, kmeans_points_per_centroid, device)."""

    @property
    def num_docs(self) -> int:
        return int(self.ledger.documents["num_docs"])


class IndexKind:
    """One kind of index (``name`` as recorded in the metadata; ``model_kind`` the model it indexes)."""

    name: str = ""
    model_kind: str = ""
    model_label: str = ""
    """The model kind as the docs name it (in messages)."""
    encodes: bool = True
    """Whether its segments hold the encoder's output (False: the lexical kind, nothing is encoded)."""
    searches_on_encoder_device: bool = False
    """Whether its retriever computes on the encoder's device (a GPU when the model is on one)."""

    # -- build ------------------------------------------------------------------------------------------
    def plan(self, icfg: Any, encoder: Any, num_docs: int, engine: dict[str, Any]) -> Any:
        """Check the settings and pick the arithmetic before anything is encoded (errors here leave nothing
        behind); returns the plan :meth:`build` takes, with ``backend_record`` for the ledger."""
        raise NotImplementedError

    def already_built(self, ledger: BuildLedger, folder: Path) -> bool:
        """Whether the ledger records this kind's base segment as complete (other ranks then have nothing to do)."""
        return False

    def build(self, job: BuildJob, plan: Any) -> tuple[dict[str, Any], dict[str, float], dict[str, Any]]:
        """Encode the collection and write the base segment's arrays in ``job.folder``, recording each stage
        in the ledger; returns (the metadata's ``<kind>`` section, timings, run facts)."""
        raise NotImplementedError

    def follow(self, job: BuildJob) -> None:
        """A rank other than 0: encode (and write) the share of the build it claims."""
        raise NotImplementedError

    # -- changes ----------------------------------------------------------------------------------------
    def write_segment(self, gen: Generation, seg: Segment, encoded: Any, dim: int, opts: Any, failpoint: Failpoint
                      ) -> tuple[dict[str, Any] | None, list[str]]:
        """Write the arrays of a new segment from the encoder's output for its documents (``add``); sets
        ``seg.<kind>`` and may change ``gen`` (a grown codec). Returns (the drift measurement or None, the
        files written, relative to the index)."""
        raise NotImplementedError

    def recluster_reason(self, gen: Generation, num_add: int, opts: Any) -> str | None:
        """Why adding ``num_add`` documents to ``gen`` should rebuild the kind's model of the data (PLAID: new
        centroids) over every live document and the new ones instead of writing a segment; None: don't."""
        return None

    def recluster(self, gen: Generation, new: Generation, add: list, dropped: tuple[np.ndarray, np.ndarray],
                  use_title: bool, encoder: Any, reason: str, opts: Any, failpoint: Failpoint) -> Any:
        """Write ``new``'s one segment holding ``gen``'s live documents (minus ``dropped``: (segment, local
        pid) of replaced rows) and ``add``, as a fresh build would; returns what was written
        (embedctl.index.recluster.Reclustered)."""
        raise NotImplementedError

    def merge_segments(self, gen: Generation, seg: Segment, masks: list[np.ndarray], failpoint: Failpoint
                       ) -> list[str]:
        """Write ``seg`` from the rows ``masks`` takes (one bool array per segment of ``gen``: every live row
        for ``compact``, a run of segments' live rows for a merge, embedctl.index.merge), in order, as
        stored: nothing is encoded again. ``failpoint`` takes the stage's bare name (``chunk-written``): the
        caller names the operation. Returns the files written."""
        raise NotImplementedError

    # -- reading ----------------------------------------------------------------------------------------
    def describe(self, gen: Generation) -> dict[str, Any]:
        """The kind's own lines of ``index info`` (empty by default)."""
        return {}


def with_encoder(record: dict[str, Any], encoder: Any) -> dict[str, Any]:
    """A backend record (the kind's arithmetic: ``name``, ``precision``) plus, for encoders that have one,
    the encode backend (``encoder``: embedctl.models.encode_backends) and, where that backend's bits depend on
    the thread count (bf16 on AMX: :func:`~embedctl.models.encode_backends.threads_in_bits`), torch's thread
    count (``encoder_threads``): what every rank of a build, and every resume of it, agrees on."""
    from embedctl.models.encode_backends import threads_in_bits

    record = dict(record)
    if getattr(encoder, "backend_name", None):
        record["encoder"] = str(encoder.backend_name)
        if threads_in_bits(encoder):
            import torch

            record["encoder_threads"] = int(torch.get_num_threads())
    return record
