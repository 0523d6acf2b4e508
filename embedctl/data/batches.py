"""Read side of the pre-batched format (Arctic Embed layout) for training.

A pre-batched folder holds ``batch_%08d/{queries,documents,relations}.parquet`` and ``metadata.json``
(written last, so its presence means the folder is complete). See docs/formats.md.

Example::

    stream = BatchStream("runs/scifact/batches", split_factor=2, seed=0)
    for step, batch in zip(range(100), stream):
        batch.relevance            # int8 [Q, D]
        state = stream.state_dict()   # save with the checkpoint; load_state_dict(state) resumes exactly

Distributed training: every rank builds the same ``BatchStream`` (same root, seed, split_factor), so
all ranks see the same global batch at each step; each rank then encodes a contiguous slice of its queries
and of its documents and all-gathers the embeddings (embedctl.train.step.prepare_inputs).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from embedctl.data.formats import (
    DAMAGED_HINT,
    PREBATCH_FORMAT,
    batch_files,
    check_records,
    join,
    read_checked_parquet,
    read_json_file,
    token_lists_of,
)
from embedctl.errors import EmbedctlError, InputError
from embedctl.util.background import background
from embedctl.util.fs import url_to_fs

QUERY_COLUMNS = ("BATCH_QUERY_ID", "QUERY_TOKEN_ID_LIST")
DOCUMENT_COLUMNS = ("BATCH_DOCUMENT_ID", "DOCUMENT_TOKEN_ID_LIST")
RELATION_COLUMNS = ("BATCH_QUERY_ID", "BATCH_DOCUMENT_ID", "RELEVANCE")
TEACHER_COLUMN = "TEACHER_SCORE"
"""Optional float32 column of relations.parquet: a teacher model's score of the pair (`prebatch.teacher`)."""


@dataclass
class Batch:
    """One (sub-)batch. ``relevance[i, j]`` labels query i against document j (0 = no label);
    ``teacher_scores[i, j]`` (float32, NaN where not scored) is a teacher's score of the pair, or None."""

    query_ids: np.ndarray
    query_tokens: list[np.ndarray]
    document_ids: np.ndarray
    document_tokens: list[np.ndarray]
    relevance: np.ndarray
    source: str | None = field(default=None, compare=False)
    teacher_scores: np.ndarray | None = field(default=None, compare=False)

    @property
    def num_queries(self) -> int:
        return len(self.query_ids)

    @property
    def num_documents(self) -> int:
        return len(self.document_ids)


def _index_of(ids: np.ndarray, wanted: np.ndarray, what: str, url: str) -> np.ndarray:
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], wanted)
    pos = np.minimum(pos, len(ids) - 1) if len(ids) else pos
    if len(ids) == 0 or not np.array_equal(ids[order][pos], wanted):
        bad = wanted[(len(ids) == 0) | (ids[order][pos] != wanted)][:3] if len(ids) else wanted[:3]
        raise InputError(f"relations.parquet names {what} ids not in the batch, e.g. {bad.tolist()}", path=url)
    return order[pos]


def _check_unique(ids: np.ndarray, name: str, url: str) -> None:
    uniq, counts = np.unique(ids, return_counts=True)
    if len(uniq) != len(ids):
        raise InputError(f"{name} holds duplicate ids, e.g. {uniq[counts > 1][:3].tolist()}", path=url,
                         hint="rebuild the batches with `embedctl prebatch` (it dedupes ids per batch)")


def read_batch(url: str, records: dict[str, dict] | None = None) -> Batch:
    """Read one ``batch_%08d`` folder (local or fsspec URL) into a :class:`Batch`. ``records`` (its entry's
    ``files`` in metadata.json: name -> {bytes, sha256}): each file is checked against its sha256 as it is
    read, so training never steps on a same-size corruption."""
    from concurrent.futures import ThreadPoolExecutor

    fs, root = url_to_fs(url)
    names = ("queries.parquet", "documents.parquet", "relations.parquet")

    def load(name: str):
        try:
            return read_checked_parquet(fs, join(root, name), (records or {}).get(name) or {},
                                        hint="rebuild the batches with `embedctl prebatch --overwrite`")
        except FileNotFoundError as exc:
            raise InputError(f"missing {name}", path=url, hint="is this a batch_%08d folder written by prebatch?") from exc
        except InputError:
            raise  # names the file and the fix already (damaged, missing)
        except Exception as exc:
            raise InputError(f"cannot read {name}: {exc}", path=url) from exc

    with ThreadPoolExecutor(3) as pool:
        q, d, r = pool.map(load, names)
    for table, cols, name in ((q, QUERY_COLUMNS, names[0]), (d, DOCUMENT_COLUMNS, names[1]), (r, RELATION_COLUMNS, names[2])):
        missing = [c for c in cols if c not in table.column_names]
        if missing:
            raise InputError(f"{name} lacks columns {missing}", path=url)
    qids = q.column("BATCH_QUERY_ID").to_numpy().astype(np.uint64, copy=False)
    dids = d.column("BATCH_DOCUMENT_ID").to_numpy().astype(np.uint64, copy=False)
    _check_unique(qids, "queries.parquet", url)
    _check_unique(dids, "documents.parquet", url)
    relevance = np.zeros((len(qids), len(dids)), dtype=np.int8)
    if r.num_rows:
        rq = _index_of(qids, r.column("BATCH_QUERY_ID").to_numpy().astype(np.uint64), "query", url)
        rd = _index_of(dids, r.column("BATCH_DOCUMENT_ID").to_numpy().astype(np.uint64), "document", url)
        relevance[rq, rd] = r.column("RELEVANCE").to_numpy().astype(np.int8)
    teacher = None
    if TEACHER_COLUMN in r.column_names:  # readers that know only the three Arctic columns ignore it
        teacher = np.full((len(qids), len(dids)), np.nan, dtype=np.float32)
        if r.num_rows:
            teacher[rq, rd] = r.column(TEACHER_COLUMN).to_numpy(zero_copy_only=False).astype(np.float32)
    return Batch(qids, token_lists_of(q.column("QUERY_TOKEN_ID_LIST")), dids,
                 token_lists_of(d.column("DOCUMENT_TOKEN_ID_LIST")), relevance, source=url, teacher_scores=teacher)


def _doc_owner(relevance: np.ndarray, query_part: np.ndarray) -> np.ndarray:
    """Part that owns each document: the part of the first query labelling it; unlabelled documents
    follow the nearest labelled document stored before them (or part 0)."""
    labelled = relevance != 0
    has = labelled.any(axis=0)
    first_q = np.where(has, labelled.argmax(axis=0), 0)
    owner = np.where(has, query_part[first_q] if len(query_part) else 0, -1)
    idx = np.where(owner >= 0, np.arange(len(owner)), -1)
    last = np.maximum.accumulate(idx) if len(idx) else idx
    return np.where(last >= 0, owner[np.maximum(last, 0)], 0)


def split_batch(batch: Batch, k: int) -> list[Batch]:
    """Split into ``k`` parts at query boundaries; each part keeps every document labelled (non-zero)
    for its queries, in stored order (a document labelled for queries in two parts goes to both).

    Queries are divided as evenly as possible (``np.array_split``); with fewer than ``k`` queries
    some parts are empty (0 queries, 0 documents).
    """
    if k < 1:
        raise ValueError(f"split factor must be >= 1, got {k}")
    if k == 1:
        return [batch]
    if batch.num_queries == 0:
        return [batch] * k
    query_parts = np.array_split(np.arange(batch.num_queries), k)
    query_part = np.zeros(batch.num_queries, dtype=np.int64)
    for j, qs in enumerate(query_parts):
        query_part[qs] = j
    owner = _doc_owner(batch.relevance, query_part)
    out = []
    for j, qs in enumerate(query_parts):
        ds = np.flatnonzero((batch.relevance[qs] != 0).any(axis=0) | (owner == j)) if len(qs) else np.zeros(0, np.int64)
        teacher = None if batch.teacher_scores is None else batch.teacher_scores[np.ix_(qs, ds)]
        out.append(Batch(batch.query_ids[qs], [batch.query_tokens[i] for i in qs], batch.document_ids[ds],
                         [batch.document_tokens[i] for i in ds], batch.relevance[np.ix_(qs, ds)], batch.source,
                         teacher))
    return out


def read_metadata(root: str) -> dict:
    """``metadata.json`` of a pre-batched folder; missing means an incomplete or foreign folder."""
    fs, path = url_to_fs(root)
    meta_path = join(path, "metadata.json")
    if not fs.exists(meta_path):
        raise InputError("no metadata.json: not a pre-batched folder, or `embedctl prebatch` did not finish", path=root,
                         hint="run `embedctl prebatch` (again, with --overwrite) to write it")
    meta = read_json_file(fs, meta_path)
    if meta.get("format") != PREBATCH_FORMAT:
        raise InputError(f"metadata.json says format {meta.get('format')!r}, expected {PREBATCH_FORMAT!r}", path=root)
    problems = check_records(fs, path, batch_files(meta.get("batches", [])))  # cheap: sizes from one listing
    if problems:
        raise InputError("the pre-batched folder is damaged: " + "; ".join(problems[:5]), path=root, hint=DAMAGED_HINT)
    return meta


def _metadata_digest(meta: dict) -> str:
    """Short digest of a pre-batched folder's metadata (changes when the batches are rebuilt differently)."""
    import hashlib
    import json

    content = {k: meta.get(k) for k in ("format_version", "batches", "counts", "token_dtype")}  # not paths
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode("utf-8")).hexdigest()[:16]


class BatchStream:
    """Endless, seeded, resumable stream of (split) batches with background prefetch.

    Epoch ``e`` visits the stored batches in ``np.random.default_rng([seed, e]).permutation(n)``
    (stored order when ``shuffle`` is false); each stored batch yields ``split_factor`` steps
    (empty parts, when a batch has fewer queries than ``split_factor``, are skipped).
    """

    def __init__(self, root: str, *, split_factor: int = 1, shuffle: bool = True, seed: int = 0, prefetch: int = 2):
        if split_factor < 1:
            raise EmbedctlError(f"`data.split_factor` must be >= 1, got {split_factor}")
        self.root = root.rstrip("/")
        self.metadata = read_metadata(self.root)
        self.batch_names = [b["name"] for b in self.metadata["batches"]]
        self.num_batches = len(self.batch_names)
        if self.num_batches == 0:
            raise InputError("the pre-batched folder holds no batches", path=root)
        self._urls = [join(self.root, n) for n in self.batch_names]
        self.split_factor, self.shuffle, self.seed, self.prefetch = split_factor, shuffle, seed, max(0, prefetch)
        self.epoch, self.index, self.part = 0, 0, 0
        self.data_fingerprint = _metadata_digest(self.metadata)

    def order(self, epoch: int) -> np.ndarray:
        """Stored-batch indices visited in ``epoch``."""
        if not self.shuffle:
            return np.arange(self.num_batches)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_batches)

    def state_dict(self) -> dict:
        """Position of the next step: ``{"epoch", "index", "part", ...}`` (JSON-serialisable)."""
        return {"epoch": self.epoch, "index": self.index, "part": self.part, "seed": self.seed,
                "shuffle": self.shuffle, "split_factor": self.split_factor, "num_batches": self.num_batches,
                "data_fingerprint": self.data_fingerprint}

    def load_state_dict(self, state: dict) -> None:
        """Resume at exactly the step after the one ``state`` was taken at."""
        for key in ("seed", "shuffle", "split_factor", "num_batches", "data_fingerprint"):
            if key in state and state[key] != getattr(self, key):
                raise EmbedctlError(
                    f"cannot resume the data stream: {key} was {state[key]!r}, now {getattr(self, key)!r}",
                    hint="resume with the same data.path (unchanged since the checkpoint) / data.split_factor / "
                    "data.shuffle / train.seed",
                )
        self.epoch, self.index, self.part = int(state["epoch"]), int(state["index"]), int(state["part"])

    def _positions(self) -> Iterator[tuple[int, int, int]]:
        """(epoch, index in epoch order, stored batch) from the current position on."""
        epoch, index = self.epoch, self.index
        while True:
            order = self.order(epoch)
            for i in range(index, self.num_batches):
                yield epoch, i, int(order[i])
            epoch, index = epoch + 1, 0

    def _batches(self) -> Iterator[tuple[int, int, Batch]]:
        for epoch, i, b in self._positions():
            yield epoch, i, read_batch(self._urls[b], self.metadata["batches"][b].get("files"))

    def _prefetched(self) -> Iterator[tuple[int, int, Batch]]:
        if self.prefetch == 0:
            return self._batches()
        return background(self._batches(), maxsize=self.prefetch, name="embedctl-batch-prefetch")

    def __iter__(self) -> Iterator[Batch]:
        start_part = self.part
        for epoch, i, batch in self._prefetched():
            parts = split_batch(batch, self.split_factor)
            for p in range(start_part, self.split_factor):
                self.epoch, self.index, self.part = self._advance(epoch, i, p)
                if parts[p].num_queries:
                    yield parts[p]
            start_part = 0

    def _advance(self, epoch: int, index: int, part: int) -> tuple[int, int, int]:
        """The position after (epoch, index, part)."""
        if part + 1 < self.split_factor:
            return epoch, index, part + 1
        if index + 1 < self.num_batches:
            return epoch, index + 1, 0
        return epoch + 1, 0, 0
