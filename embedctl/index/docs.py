"""The document table of an index: original string ids, titles and texts in pid order (docs.parquet).

Written once while the collection is read (ids checked for duplicates before any encoding); read lazily
at search time: the id column for every ranking, the texts only for the rows shown as snippets.
While it is written, :class:`DocDigests` hashes what the encoder will read of every document, so the
collection's fingerprint and the duplicate check of the PLAID builder need no second pass over the texts.

Example::

    with DocTableWriter(tmp / "docs.parquet") as w:
        w.add("doc-1", "Title", "Body text")
    table = DocTable(tmp / "docs.parquet")
    table.ids_of([0])          # ["doc-1"]
    table.snippets([0], 80)    # ["Title Body text"]
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.index.files import FIELDS_FILE

ROW_GROUP = 8192
CACHE_BYTES = 256 << 20  # decoded row groups a DocTable keeps (per documents file)
# up to this many rows are read one by one: Array.take imports pyarrow.compute (~0.1 s of a search's cold
# start) while a scalar read costs ~1-5 us; beyond it take is faster (100 ids: 0.5 vs 1.0 ms), and a row
# group's texts are worth turning into lists (_RowGroup)
FEW_ROWS = 32
DIGEST_BYTES = 16


class DocDigests:
    """A 16-byte blake2b digest of every document's encoder input, in pid order: a text as UTF-8, a token
    id list as int64 (the same bytes whatever integer type it came in).

    >>> d = DocDigests(); d.add("a"); d.add("b"); d.add("a")
    >>> duplicate_representatives(d.array()).tolist()
    [0, 1, 0]
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def add(self, item: Any) -> None:
        self._buf += item_digest(item)

    def extend(self, items: Iterator | Sequence) -> DocDigests:
        for item in items:
            self.add(item)
        return self

    def array(self) -> np.ndarray:
        """uint8 [N, 16]."""
        return np.frombuffer(bytes(self._buf), dtype=np.uint8).reshape(-1, DIGEST_BYTES).copy()


def item_digest(item: Any) -> bytes:
    data = item.encode("utf-8") if isinstance(item, str) else np.asarray(item, dtype=np.int64).tobytes()
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def collection_sha256(digests: np.ndarray) -> str:
    """The collection's fingerprint: sha256 over its documents' digests in order."""
    return hashlib.sha256(np.ascontiguousarray(digests, dtype=np.uint8).tobytes()).hexdigest()


def duplicate_representatives(digests: np.ndarray) -> np.ndarray:
    """For each row of uint8 [n, 16] digests: the index of the first row with the same digest (itself if new)."""
    if len(digests) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = np.ascontiguousarray(digests, dtype=np.uint8).view(f"V{DIGEST_BYTES}").ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first[inverse.ravel()].astype(np.int64)


class DocTableWriter:
    """Streams (id, title, text) rows into parquet in row groups (bounded memory), temp name + rename.

    The rows' fields (metadata, embedctl.index.fields) are kept in memory and written on close to
    ``fields.parquet`` beside it, typed from every value, when any row has one (``has_fields``)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.fields_path = self.path.with_name(FIELDS_FILE)
        self._rows: dict[str, list] = {"id": [], "title": [], "text": []}
        self._fields: list[dict[str, Any] | None] = []
        self._writer = None
        self.count = 0
        self.has_fields = False

    def __enter__(self) -> DocTableWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def add(self, doc_id: str, title: str | None, text: str, fields: dict[str, Any] | None = None) -> None:
        self._fields.append(fields or None)
        self._rows["id"].append(doc_id)
        self._rows["title"].append(title)
        self._rows["text"].append(text)
        self.count += 1
        if len(self._rows["id"]) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.tmp, schema, compression="zstd")
        if self._rows["id"]:
            self._writer.write_table(pa.table(self._rows, schema=schema))
        self._rows = {"id": [], "title": [], "text": []}

    def close(self) -> None:
        import os

        from embedctl.index.fields import write_fields

        try:  # a full disk fails here as often as in add(): the temp file goes either way
            self._flush()
            self._writer.close()
            self.has_fields = write_fields(self.fields_path, self._fields)
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()  # may fail again on a full disk; the unlink below must still run
        except OSError:
            pass
        finally:
            self._writer = None
            self.tmp.unlink(missing_ok=True)


def iter_doc_batches(path: Path, batch_size: int = 4096) -> Iterator[tuple[list[str], list[str | None], list[str]]]:
    """Yield (ids, titles, texts) lists of up to ``batch_size`` rows in pid order."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as pf:
        for batch in pf.iter_batches(batch_size=batch_size, columns=["id", "title", "text"]):
            cols = batch.to_pydict()
            yield cols["id"], cols["title"], cols["text"]


def snippet(title: str | None, text: str | None, width: int = 160) -> str:
    """``title + " " + text``, whitespace collapsed, cut to ``width`` characters (an ellipsis marks the cut)."""
    full = " ".join(f"{title or ''} {text or ''}".split())
    return full if len(full) <= width else full[: width - 1] + "…"


class _RowGroup:
    """One decoded row group of titles and texts. The first read of a few rows takes them straight from the
    Arrow columns (a cold `embedctl search` pays nothing more); a second read, or one of many rows, turns
    the group into Python lists once (~4 ms per 1,000 SciFact rows), after which a row costs a list index:
    100 hits' texts in ~0.02 ms instead of ~0.45 ms through Table.take, for a long-lived reader (the API,
    the server)."""

    def __init__(self, table: Any):
        self.table = table
        self.nbytes = 2 * int(table.nbytes)  # the Arrow buffers, and as much again once they are lists
        self.reads = 0
        self.titles: list | None = None
        self.texts: list | None = None

    def take(self, local: np.ndarray) -> list[tuple[str | None, str]]:
        self.reads += 1
        if self.texts is None and (self.reads > 1 or len(local) > FEW_ROWS):
            self.titles = self.table.column("title").to_pylist()
            self.texts = self.table.column("text").to_pylist()
        if self.texts is None:
            titles, texts = self.table.column("title"), self.table.column("text")
            return [(titles[int(i)].as_py(), texts[int(i)].as_py()) for i in local]
        return [(self.titles[i], self.texts[i]) for i in local.tolist()]


class DocTable:
    """Read side: the file is opened at once (a writer deleting it later does not disturb this reader), ids
    loaded on first use (one column), texts read by row group (8,192 rows) on demand and kept decoded, the
    most recently used first, up to :data:`CACHE_BYTES`: decompressing a group costs ~25 ms (SciFact), a
    row taken from a decoded one ~10 us, so a long-lived reader (embedctl.Index, the server) pays it once."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.path = Path(path)
        self._file = pq.ParquetFile(self.path, memory_map=True)
        self._starts = np.cumsum([0] + [self._file.metadata.row_group(i).num_rows
                                        for i in range(self._file.num_row_groups)])
        self._ids = None
        self._id_list: list[str] | None = None  # the ids as Python strings, once reads show a long-lived reader
        self._id_reads = 0
        self._groups: OrderedDict[int, _RowGroup] = OrderedDict()  # row group -> its decoded titles and texts
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def _load_ids(self):
        if self._ids is None:
            self._ids = self._file.read(columns=["id"]).column("id").combine_chunks()
        return self._ids

    def __len__(self) -> int:
        return int(self._starts[-1])

    def ids_of(self, pids: Sequence[int] | np.ndarray) -> list[str]:
        """Original ids of internal pids (int positions)."""
        pids = np.asarray(pids, dtype=np.int64)
        ids = self._load_ids()
        self._id_reads += 1
        if self._id_list is None and (self._id_reads > 1 or len(pids) > FEW_ROWS):
            self._id_list = ids.to_pylist()  # as _RowGroup does for texts: ~0.1 ms per 1,000 ids, once
        if self._id_list is None:
            return [ids[int(p)].as_py() for p in pids]
        id_list = self._id_list
        return [id_list[p] for p in pids.tolist()]

    def rows(self, pids: Sequence[int] | np.ndarray) -> dict[int, tuple[str | None, str]]:
        """``{pid: (title, text)}`` of the requested rows, taken from their decoded row groups."""
        pids = np.asarray(pids, dtype=np.int64)
        groups = np.searchsorted(self._starts, pids, side="right") - 1
        rows: dict[int, tuple] = {}
        for group in sorted(set(groups.tolist())):  # np.unique would import numpy.ma (15-40 ms)
            wanted = pids[groups == group]
            values = self._group(group).take(wanted - self._starts[group])
            for pid, value in zip(wanted, values, strict=True):
                rows[int(pid)] = value
        return rows

    def _group(self, group: int) -> _RowGroup:
        with self._lock:  # a server's search threads share the table (open_doc_table)
            decoded = self._groups.get(group)
            if decoded is not None:
                self._groups.move_to_end(group)
                return decoded
            decoded = _RowGroup(self._file.read_row_group(group, columns=["title", "text"]))
            self._groups[group] = decoded
            self._cached_bytes += decoded.nbytes
            while self._cached_bytes > CACHE_BYTES and len(self._groups) > 1:  # the least recently used go first
                _, old = self._groups.popitem(last=False)
                self._cached_bytes -= old.nbytes
            return decoded

    def passage_numbers(self, pids: Sequence[int] | np.ndarray) -> list[int]:
        """Each row's number among the consecutive rows of its id ending at it (0: the first): a passage's
        number within its document in an index of passages (embedctl.index.passages)."""
        ids = self._load_ids()
        out = []
        for pid in np.asarray(pids, dtype=np.int64).tolist():
            doc_id, first = ids[pid].as_py(), pid
            while first > 0 and ids[first - 1].as_py() == doc_id:
                first -= 1
            out.append(pid - first)
        return out

    def titles_and_texts(self, pids: Sequence[int] | np.ndarray) -> list[tuple[str | None, str]]:
        """``(title, text)`` of each pid, in the pids' order."""
        pids = np.asarray(pids, dtype=np.int64)
        if len(self._starts) == 2:  # one row group (up to 8,192 documents): no regrouping
            return self._group(0).take(pids)
        rows = self.rows(pids)
        return [rows[pid] for pid in pids.tolist()]

    def snippets(self, pids: Sequence[int] | np.ndarray, width: int = 160) -> list[str]:
        """``title + " " + text`` of each pid, whitespace collapsed, cut to ``width`` characters."""
        return [snippet(title, text, width) for title, text in self.titles_and_texts(pids)]


_SHARED: weakref.WeakValueDictionary[tuple, DocTable] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def open_doc_table(path: Path) -> DocTable:
    """The :class:`DocTable` of the documents file ``path``, shared by every reader in this process that has
    the same file open: a server opens each new version of an index, and all but one of its segments'
    files are those of the version before, whose decoded row groups (~13-25 ms to decode again each) and
    ids then carry over. The same file: same path, inode, size, modification and change times (segment
    files are written once, under a new name; a rebuild over the index writes new inodes)."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _SHARED_LOCK:
        table = _SHARED.get(key)
        if table is None:
            table = _SHARED[key] = DocTable(path)
        return table


class SegmentedDocTable:
    """The documents of several segments behind one pid space: segment ``s`` holds pids ``offsets[s] ..
    offsets[s + 1] - 1`` (its local pids shifted); the same calls as :class:`DocTable`."""

    def __init__(self, tables: list[DocTable]):
        self.tables = tables
        self.offsets = np.cumsum([0] + [len(t) for t in tables]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _split(self, pids) -> tuple[np.ndarray, np.ndarray]:
        pids = np.asarray(pids, dtype=np.int64)
        seg = np.searchsorted(self.offsets, pids, side="right") - 1
        return seg, pids - self.offsets[seg]

    def _per_segment(self, pids, read) -> list:
        """``read(table, local pids)`` for each segment the pids fall in, put back in the pids' order."""
        if len(self.tables) == 1:
            return list(read(self.tables[0], pids))
        seg, local = self._split(pids)
        out: list = [None] * len(local)
        for s in np.unique(seg):
            where = np.flatnonzero(seg == s)
            for j, value in zip(where, read(self.tables[int(s)], local[where]), strict=True):
                out[int(j)] = value
        return out

    def ids_of(self, pids: Sequence[int] | np.ndarray) -> list[str]:
        return self._per_segment(pids, DocTable.ids_of)

    def snippets(self, pids: Sequence[int] | np.ndarray, width: int = 160) -> list[str]:
        return self._per_segment(pids, lambda table, local: table.snippets(local, width))

    def passage_numbers(self, pids: Sequence[int] | np.ndarray) -> list[int]:
        return self._per_segment(pids, DocTable.passage_numbers)

    def titles_and_texts(self, pids: Sequence[int] | np.ndarray) -> list[tuple[str | None, str]]:
        """``(title, text)`` of each pid, in the pids' order."""
        return self._per_segment(pids, DocTable.titles_and_texts)
