"""PLAID on-disk format (spec: docs/index-format.md): file names, version, reading and checking.

Every array is a ``.npy`` file (memory-mappable, no pickles); JSON for plans and metadata. A chunk is
finished when ``{i}.metadata.json`` exists; the index is complete when ``metadata.json`` exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError

FORMAT_NAME = "embedctl-plaid"
FORMAT_VERSION = 1

PLAN = "plan.json"
METADATA = "metadata.json"
CENTROIDS = "centroids.npy"
AVG_RESIDUAL = "avg_residual.npy"
BUCKET_CUTOFFS = "bucket_cutoffs.npy"
BUCKET_WEIGHTS = "bucket_weights.npy"
IVF = "ivf.npy"
IVF_LENGTHS = "ivf_lengths.npy"
WORK = "_work"  # temporary sample spill, removed when the index is complete


def chunk_files(i: int) -> dict[str, str]:
    """Names of chunk ``i``'s files; ``metadata`` is written last and marks the chunk finished."""
    return {
        "codes": f"{i}.codes.npy",          # int32 [E_i]: centroid id per vector
        "residuals": f"{i}.residuals.npy",  # uint8 [E_i, dim * nbits / 8]: packed residual buckets
        "norms": f"{i}.norms.npy",          # float16 [E_i]: norm of each decompressed vector (for scoring)
        "doclens": f"doclens.{i}.npy",      # int32 [n_i]: vectors per document
        "metadata": f"{i}.metadata.json",   # {passage_offset, num_passages, num_embeddings, embedding_offset}
    }


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except (OSError, json.JSONDecodeError) as exc:
        raise EmbedctlError(f"{path}: unreadable index file ({exc})",
                            hint="rebuild the index with `embedctl index ... index.overwrite=true`") from exc


def load_npy(path: Path, mmap: bool = True) -> np.ndarray:
    """np.load without pickles; memory-mapped by default."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError as exc:
        raise EmbedctlError(f"{path}: missing index file", hint="the index is incomplete: rebuild it") from exc


def read_index_metadata(index_dir: str | Path) -> dict[str, Any]:
    """Read and check ``metadata.json`` of a complete index; clear errors for missing/foreign/old indexes."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir():
        raise EmbedctlError(f"no index at {index_dir}", hint="build one with `embedctl index --collection ...`")
    path = index_dir / METADATA
    if not path.is_file():
        hint = ("indexing did not finish: rerun the same `embedctl index` command to resume"
                if (index_dir / PLAN).is_file() else "build one with `embedctl index --collection ...`")
        raise EmbedctlError(f"{index_dir} is not a complete PLAID index (no {METADATA})", hint=hint)
    meta = read_json(path)
    check_format(meta, path)
    return meta


def check_format(meta: dict[str, Any], path: Path) -> None:
    if meta.get("format") != FORMAT_NAME:
        raise EmbedctlError(f"{path}: not an embedctl PLAID index (format {meta.get('format')!r})",
                            hint="point at a folder written by `embedctl index` with kind plaid")
    if meta.get("format_version") != FORMAT_VERSION:
        raise EmbedctlError(
            f"{path}: PLAID format version {meta.get('format_version')!r}, this embedctl reads version {FORMAT_VERSION}",
            hint="rebuild the index with this version of embedctl (index.overwrite=true)")
