"""Every file and folder of an index on disk, named once (docs/index-format.md describes their contents).

``<index.root>/``
    ``LATEST``                   the newest index's name (what `embedctl search` opens without --index)
    ``.<name>.building/``        a build in progress (:func:`building_dir`), renamed onto ``<name>/`` when done
``<index.root>/<name>/``
    ``embedctl_index.json``      the build's metadata (generation 0), written last
    ``docs.parquet``, ``ids.npy``  the base segment's documents (id, title, text) and id table
    ``fields.parquet``           the base segment's fields (metadata columns, embedctl.index.fields), if any
    ``lexical/``                 the base segment's BM25 side (:data:`LEXICAL_FILES`, embedctl.index.lexical)
    ``plaid/``                   PLAID: the codec (:data:`CODEC_FILES`), chunk arrays (:func:`plaid_chunk_files`), IVF
    ``dense.faiss``              dense: the faiss index of the base segment
    ``segments/g<N>/``           a segment written by change N (its own docs, ids, fields, arrays, lexical/)
    ``deletes/<segment>.g<N>.npy``  tombstones of a segment written by change N
    ``codec/``                   PLAID: codec files grown by an add (``index.drift_action=expand``)
    ``commits/commit.<N>.json``  the commit point of generation N, written last
    ``runs/``                    the run info of each change (never collected)
Inside a build folder only (removed when the index is complete): ``ledger.json`` and ``_work/`` (document
digests, chunk fragments of other ranks, the k-means sample spill, dense chunk vectors).
"""

from __future__ import annotations

from pathlib import Path

META_FILE = "embedctl_index.json"
DOCS_FILE = "docs.parquet"
FIELDS_FILE = "fields.parquet"
LEXICAL_DIR = "lexical"
# the BM25 side of a segment (bm25s's arrays and JSON, stored by embedctl: .npy without pickles)
LEXICAL_FILES = ("data.npy", "indices.npy", "indptr.npy", "vocab.json", "params.json")
IDS_FILE = "ids.npy"
LATEST_FILE = "LATEST"
RUNS_DIR = "runs"

COMMITS_DIR = "commits"
SEGMENTS_DIR = "segments"
DELETES_DIR = "deletes"
CODEC_DIR = "codec"

PLAID_DIR = "plaid"
CODEC_NAMES = ("centroids", "avg_residual", "bucket_cutoffs", "bucket_weights")
CODEC_FILES = tuple(f"{n}.npy" for n in CODEC_NAMES)
CENTROIDS, AVG_RESIDUAL, BUCKET_CUTOFFS, BUCKET_WEIGHTS = CODEC_FILES
IVF = "ivf.npy"
IVF_LENGTHS = "ivf_lengths.npy"
DENSE_FILE = "dense.faiss"

LEDGER_FILE = "ledger.json"
WORK_DIR = "_work"
DIGESTS_FILE = f"{WORK_DIR}/doc_digests.npy"
CHUNK_FRAGMENTS = f"{WORK_DIR}/chunks"
DENSE_WORK = f"{WORK_DIR}/dense"


def building_dir(root: Path, name: str) -> Path:
    """Where an index is built before it is renamed into place (stable, so a rerun can resume)."""
    return root / f".{name}.building"


def plaid_chunk_files(i: int) -> dict[str, str]:
    """Names of PLAID chunk ``i``'s arrays, inside ``plaid/``."""
    return {
        "codes": f"{i}.codes.npy",          # int32 [E_i]: centroid id per vector
        "residuals": f"{i}.residuals.npy",  # uint8 [E_i, dim * nbits / 8]: packed residual buckets
        "norms": f"{i}.norms.npy",          # float16 [E_i]: norm of each decompressed vector (for scoring)
        "doclens": f"doclens.{i}.npy",      # int32 [n_i]: vectors per document
    }


def commit_name(number: int) -> str:
    return f"{COMMITS_DIR}/commit.{number}.json"


def segment_dir(number: int) -> str:
    """The folder of the segment written by change ``number``."""
    return f"{SEGMENTS_DIR}/g{number:06d}"


def tombstone_file(segment: str, number: int) -> str:
    return f"{DELETES_DIR}/{segment}.g{number:06d}.npy"


def grown_codec_file(name: str, number: int) -> str:
    return f"{CODEC_DIR}/{name}.g{number:06d}.npy"
