"""Passages (``index.passages``): long documents split by tokens into overlapping passages, the passages
indexed as the rows of the index, search mapped back to documents.

The seam is the row: with passages on, every row of a segment (``docs.parquet``, ``ids.npy``, fields,
tombstones, the kind's vectors, the BM25 side) is one passage, its id the document's, its title the
document's, its text the passage's, its fields the document's (passages inherit them). A document's
passages are consecutive rows of one segment, in order. So nothing below the rows changes: every kind
indexes passages as it indexes documents, a filter allows the passages of the documents it allows,
compact copies rows; what knows about passages is

- the split (here, :class:`Splitter`), used where documents become rows: the build's collection
  (embedctl.index.collection) and ``index add`` (embedctl.index.update);
- deletes and updates by id, which act on every row of the id (embedctl.index.idtable.lookup_rows);
- search (embedctl.search.driver), which asks the engine for passages and keeps the best one per
  document (:func:`best_per_document`), asking deeper until it holds k documents or the index has no more.

Splitting, for a document of ``n`` text tokens and ``size`` tokens per passage (``index.passage_tokens``;
null: all the model's document length leaves for text), ``overlap`` (``index.passage_overlap``): the
windows start at ``0, step, 2 step, ...`` with ``step = size - overlap`` until one reaches the end; a
window is the document's text from its first token's first character to its last token's last
character (the characters between tokens kept as they are). A title (``index.use_title``) is repeated
before every passage and counts in its ``size``. A document of at most ``size`` tokens is one passage,
its text unchanged (so with passages on an index of short documents equals one without).

Example::

    splitter = Splitter.for_tokenizer(encoder.tokenizer, PassageSpec(tokens=64, overlap=16))
    rows = splitter.split(record, use_title=True)      # [TextRecord(id=record.id, text=passage, ...), ...]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from embedctl.data.sources import TextRecord
from embedctl.errors import ConfigError


@dataclass(frozen=True)
class PassageSpec:
    """What the index records of index.passages: ``tokens`` (None: the model's text budget), ``overlap``."""

    tokens: int | None
    overlap: int

    @classmethod
    def of_config(cls, icfg: Any) -> PassageSpec | None:
        """The spec of an IndexConfig; None when index.passages is off."""
        if not getattr(icfg, "passages", False):
            return None
        return cls(icfg.passage_tokens, int(icfg.passage_overlap))

    @classmethod
    def of_metadata(cls, meta: dict[str, Any]) -> PassageSpec | None:
        """The spec an index was built with (its request); None for an index without passages."""
        built = ((meta.get("request") or {}).get("index") or {})
        if not built.get("passages"):
            return None
        return cls(built.get("passage_tokens"), int(built.get("passage_overlap", 32)))

    def size(self, budget: int) -> int:
        """Tokens per passage for a model leaving ``budget`` text tokens; refused when the overlap is not
        less (the message names both keys and the fix)."""
        size = int(self.tokens) if self.tokens is not None else int(budget)
        if self.overlap >= size:
            origin = "index.passage_tokens" if self.tokens is not None else \
                f"index.passage_tokens (null: the model's {budget} text tokens, model.doc_max_length less specials)"
            raise ConfigError([f"`index.passage_overlap`: {self.overlap} must be less than {origin} = {size}; "
                               f"fix: set index.passage_overlap={size // 4} (or raise index.passage_tokens / "
                               "model.doc_max_length)"])
        return size


def window_starts(n: int, size: int, overlap: int) -> list[int]:
    """First token of each passage of a text of ``n`` tokens (one passage when ``n <= size``)."""
    if n <= size:
        return [0]
    step = size - overlap
    starts = list(range(0, n - size, step))
    return starts + [starts[-1] + step] if starts[-1] + size < n else starts


def split_text(text: str, offsets: Sequence[tuple[int, int]], size: int, overlap: int) -> list[tuple[int, str]]:
    """``(character offset, passage text)`` of each passage of ``text`` whose tokens span ``offsets``."""
    n = len(offsets)
    if n <= size:
        return [(0, text)]
    out = []
    for start in window_starts(n, size, overlap):
        lo, hi = offsets[start][0], offsets[min(n, start + size) - 1][1]
        out.append((int(lo), text[lo:hi]))
    return out


class Splitter:
    """Splits records into passage records with one tokenizer (``token_offsets(texts)`` and the number of
    tokens of a title)."""

    def __init__(self, tokenizer: Any, size: int, overlap: int):
        self.tokenizer, self.size, self.overlap = tokenizer, int(size), int(overlap)

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, spec: PassageSpec) -> Splitter:
        return cls(tokenizer, spec.size(tokenizer.text_budget("document")), spec.overlap)

    def split_many(self, records: Sequence[TextRecord], use_title: bool) -> list[list[TextRecord]]:
        """Each record's passages (records with the record's id, title and fields, the passage's text)."""
        offsets = self.tokenizer.token_offsets([r.text for r in records])
        titled = [r.title if use_title and r.title else None for r in records]
        title_lens = self._title_tokens(titled)
        out = []
        for record, offs, title_len in zip(records, offsets, title_lens, strict=True):
            size = max(self.size - title_len, self.overlap + 1)  # the title is repeated in every passage
            out.append([dataclasses.replace(record, text=text)
                        for _, text in split_text(record.text, offs, size, self.overlap)])
        return out

    def split(self, record: TextRecord, use_title: bool) -> list[TextRecord]:
        return self.split_many([record], use_title)[0]

    def _title_tokens(self, titles: list[str | None]) -> list[int]:
        present = [t for t in titles if t]
        counts = iter(len(o) for o in self.tokenizer.token_offsets(present))
        return [next(counts) if t else 0 for t in titles]


def best_per_document(pids: np.ndarray, scores: np.ndarray, ids: Sequence[str], k: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The first (best) passage of each document in a ranking of passages (best first), at most ``k``:
    (pids, scores) of those passages, so each document appears once, scored by its best passage."""
    seen: set[str] = set()
    keep: list[int] = []
    for j, doc_id in enumerate(ids):
        if doc_id not in seen:
            seen.add(doc_id)
            keep.append(j)
            if len(keep) == k:
                break
    where = np.asarray(keep, dtype=np.int64)
    return np.asarray(pids)[where], np.asarray(scores)[where]


def live_documents(gen: Any) -> int:
    """Distinct ids among a generation's live rows: its documents when the rows are passages."""
    from embedctl.index.docs import DocTable

    seen: set[str] = set()
    for seg in gen.segments:
        table = DocTable(gen.path(seg.docs))
        live = np.flatnonzero(gen.live_mask(seg))
        seen.update(table.ids_of(live))
    return len(seen)
