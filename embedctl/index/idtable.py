"""Id tables: find a document by its string id in a segment without reading the segment's documents.

Each segment has ``ids.npy``: int64 ``[3, rows]``, columns sorted by (hash high, hash low): row 0 the high
64 bits of the 16-byte blake2b of the id (UTF-8), row 1 the low 64 bits, row 2 the local pid. Looking up
``m`` ids costs ``m log(rows)`` reads of a memory-mapped file, whatever the size of the segment; two
different ids sharing 128 hash bits are not expected in the life of the universe, and ids are never compared
as strings here.

Example::

    table = id_table(["a", "b", "c"])
    lookup(table, ["c", "x"])        # array([ 2, -1])
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


def id_hashes(ids: Sequence[str]) -> np.ndarray:
    """int64 [2, n]: the high and low 64 bits of each id's 16-byte blake2b."""
    raw = b"".join(hashlib.blake2b(str(i).encode("utf-8"), digest_size=16).digest() for i in ids)
    return np.frombuffer(raw, dtype=">i8").astype(np.int64).reshape(-1, 2).T.copy() if ids else np.zeros((2, 0), np.int64)


def id_table(ids: Sequence[str]) -> np.ndarray:
    """The id table of a segment whose local pid ``i`` has id ``ids[i]`` (int64 [3, n])."""
    h = id_hashes(ids)
    order = np.lexsort((h[1], h[0]))
    return np.stack([h[0][order], h[1][order], order.astype(np.int64)])


def lookup(table: np.ndarray, ids: Sequence[str]) -> np.ndarray:
    """int64 [len(ids)]: the local pid of each id in the segment, -1 where it has none."""
    h = id_hashes(ids)
    out = np.full(len(ids), -1, dtype=np.int64)
    if table.shape[1] == 0 or not len(ids):
        return out
    hi = table[0]
    lo_pos = np.searchsorted(hi, h[0], side="left")
    hi_pos = np.searchsorted(hi, h[0], side="right")
    for j in np.flatnonzero(hi_pos > lo_pos):  # almost always one candidate: the low half decides
        lo, hi_end = int(lo_pos[j]), int(hi_pos[j])
        match = np.flatnonzero(np.asarray(table[1, lo:hi_end]) == h[1, j])
        if len(match):
            out[j] = int(table[2, lo + int(match[0])])
    return out


def lookup_rows(table: np.ndarray, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every row of each id (an index of passages, embedctl.index.passages, has several rows per id):
    ``(which, local)`` int64 arrays, ``ids[which[j]]`` having local pid ``local[j]``, each id's rows in pid
    order. Same cost as :func:`lookup`: the rows of one id are adjacent in the sorted table."""
    h = id_hashes(ids)
    which: list[int] = []
    local: list[int] = []
    if table.shape[1] == 0 or not len(ids):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    hi = table[0]
    lo_pos = np.searchsorted(hi, h[0], side="left")
    hi_pos = np.searchsorted(hi, h[0], side="right")
    for j in np.flatnonzero(hi_pos > lo_pos):
        lo, hi_end = int(lo_pos[j]), int(hi_pos[j])
        rows = np.sort(np.asarray(table[2, lo:hi_end])[np.asarray(table[1, lo:hi_end]) == h[1, j]])
        which += [int(j)] * len(rows)
        local += rows.tolist()
    return np.asarray(which, dtype=np.int64), np.asarray(local, dtype=np.int64)
