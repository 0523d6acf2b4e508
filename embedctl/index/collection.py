"""Collections an index is built from: text files (TSV / JSONL / parquet / BEIR folder) or a token cache.

Both give the driver the same three things: the document table (``docs.parquet``: original string ids,
titles, texts for snippets) with a digest of every document's encoder input (computed in the same pass:
the fingerprint and the duplicate check read no text again) and a random-access sequence of encoder inputs
for the index kind's builder. Text inputs are ``title + " " + text`` strings; token-cache
inputs are the cached token id lists (special tokens, prefix, markers included), which must have been
made with exactly the tokenization of the model being indexed (checked, fails otherwise).

Example::

    coll = open_collection("corpus.jsonl", use_title=True)
    digests = coll.write_docs(work, encoder=None)   # uint8 [N, 16]; text collections need no encoder here
    items = coll.plaid_items(work)                  # the encoder's inputs, random access by pid
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.data.sources import TextRecord, beir_paths, is_beir_folder, iter_texts, join_title
from embedctl.data.token_cache import open_token_cache
from embedctl.errors import EmbedctlError, InputError, NotImplementedYet
from embedctl.index import meta as M
from embedctl.index.docs import DocDigests, DocTableWriter, collection_sha256
from embedctl.index.passages import PassageSpec, Splitter
from embedctl.models.tokenization import fingerprint_differences
from embedctl.util.console import stderr_console
from embedctl.util.fs import folder_fs


def encode_texts(ids: list[str], titles: list[str | None], texts: list[str]) -> list[str]:
    """What the encoder reads for each document: ``title + " " + text`` (the text alone without a title)."""
    return [join_title(TextRecord(id=i, text=t, title=h, line=0)) for i, h, t in zip(ids, titles, texts, strict=True)]


def is_token_cache(url: str) -> bool:
    """A folder written by `embedctl pretokenize` (a cache root with documents/, or a side folder)."""
    found = folder_fs(url)
    if found is None:
        return False
    fs, path = found
    return any(fs.exists(f"{path}/{name}") for name in ("ledger.json", "shards", "documents/ledger.json",
                                                        "documents/shards"))


def open_collection(url: str, use_title: bool = True, passages: PassageSpec | None = None):
    """The collection at ``url``; ``passages`` (index.passages): a text collection's documents are written
    as their passages (embedctl.index.passages); a token cache is refused with it."""
    if is_token_cache(url):
        if passages is not None:
            raise NotImplementedYet(f"{url}: index.passages on a token cache is not supported yet (its documents "
                                    "are token lists already cut at the model's length)",
                                    hint="index the text collection instead, or set index.passages=false")
        return TokenCacheCollection(url)
    return TextCollection(url, use_title, passages)


class TextCollection:
    """A TSV / JSONL / parquet file or a BEIR folder (its corpus.jsonl); local path or fsspec URL."""

    has_text = True  # an index of it keeps a lexical side (index.lexical)

    def __init__(self, url: str, use_title: bool, passages: PassageSpec | None = None):
        self.url = beir_paths(url)[0] if is_beir_folder(url) else url
        self.use_title = use_title
        self.passages = passages
        self.needs_encoder_for_docs = passages is not None  # the split needs the model's tokenizer

    def write_docs(self, work: Path, encoder: Any = None) -> np.ndarray:
        """Copy into docs.parquet (with index.passages: one row per passage); iter_texts raises InputError
        (file:line) on malformed rows, empty texts, duplicate ids or an empty collection. Returns the digests
        of the encoder inputs (uint8 [N, 16], one per row)."""
        digests = DocDigests()
        empty = 0
        records = iter_texts(self.url, on_error="fail", allow_empty=True)
        if self.passages is not None:
            records = _passage_rows(records, Splitter.for_tokenizer(encoder.tokenizer, self.passages), self.use_title)
        with DocTableWriter(work / M.DOCS_FILE) as writer:
            # an empty document (no title, no text; public BEIR collections have them) is encoded as "",
            # as sentence-transformers and BEIR do
            for record in records:
                writer.add(record.id, record.title if self.use_title else None, record.text, record.fields)
                digests.add(join_title(record, self.use_title))  # what encode_texts gives the encoder
                empty += not join_title(record, self.use_title).strip()
        if empty:
            stderr_console().print(f"note: {empty} document(s) of {self.url} have no title and no text: indexed as "
                                   "empty texts (as sentence-transformers encodes them)", markup=False)
        return digests.array()

    def plaid_items(self, work: Path) -> Sequence:
        return DocTexts(work / M.DOCS_FILE)


def _passage_rows(records: Iterable[TextRecord], splitter: Splitter, use_title: bool, batch: int = 256
                  ) -> Iterator[TextRecord]:
    """The passages of ``records``, in order (tokenized ``batch`` documents at a time)."""
    pending: list[TextRecord] = []
    for record in records:
        pending.append(record)
        if len(pending) == batch:
            yield from (p for parts in splitter.split_many(pending, use_title) for p in parts)
            pending = []
    if pending:
        yield from (p for parts in splitter.split_many(pending, use_title) for p in parts)


class DocTexts(Sequence):
    """The encoder's text of every document (title joined), by pid, read from docs.parquet on demand.

    Random access and slices (what the PLAID builder needs for its sample and its chunks) without a
    Python string per document: the table stays in Arrow memory.
    """

    def __init__(self, docs_path: Path):
        import pyarrow.parquet as pq

        self.table = pq.read_table(docs_path, columns=["id", "title", "text"], memory_map=True)

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, item):
        if isinstance(item, slice):
            start, stop, step = item.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            part = self.table.slice(start, max(0, stop - start)).to_pydict()
            return encode_texts(part["id"], part["title"], part["text"])
        index = int(item)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(item)
        row = self.table.slice(index, 1).to_pydict()
        return encode_texts(row["id"], row["title"], row["text"])[0]


class TokenCacheCollection:
    """The documents side of a token cache; its tokenization must equal the model's (else a clear error)."""

    needs_encoder_for_docs = True

    def __init__(self, url: str):
        self.url = url
        self.cache = open_token_cache(url, "documents")

    def check_tokenizer(self, encoder: Any) -> None:
        import json

        built = self.cache.fingerprint.get("tokenizer", {})
        now = json.loads(json.dumps(encoder.tokenizer.fingerprint()))
        diff = fingerprint_differences(built, now)
        if diff:
            raise EmbedctlError(
                f"{self.url}: the token cache was made with another tokenization than this model's: " + "; ".join(diff),
                hint="index with the model settings used for `embedctl pretokenize` (same config file), "
                     "or index the text collection instead")

    def write_docs(self, work: Path, encoder: Any) -> np.ndarray:
        """ids from the cache's id map; snippet texts decoded from the tokens (special tokens dropped).
        Returns the digests of the token id lists (uint8 [N, 16])."""
        self.check_tokenizer(encoder)
        ids = self.cache.ids
        first: dict[str, int] = {}
        for row, doc_id in enumerate(ids, start=1):
            if first.setdefault(doc_id, row) != row:
                raise InputError(f"duplicate document id {doc_id!r} (rows {first[doc_id]} and {row})", path=self.url,
                                 hint="pretokenize a collection with unique ids")
        if not ids:
            raise InputError("the token cache holds no documents", path=self.url)
        backend = encoder.tokenizer.tokenizer
        digests = DocDigests()
        with DocTableWriter(work / M.DOCS_FILE) as writer:
            row = 0
            for _, lists in self.cache.iter_chunks():
                texts = backend.batch_decode([x.tolist() for x in lists], skip_special_tokens=True)
                for text, tokens in zip(texts, lists, strict=True):
                    writer.add(ids[row], None, text)
                    digests.add(tokens)
                    row += 1
        return digests.array()

    def plaid_items(self, work: Path) -> Sequence:
        return [x.tolist() for x in self.cache.token_lists()]


class MemoryCollection:
    """Documents held in memory (texts, or token-id lists made with the model's tokenizer) with ids ``"0"`` ..
    ``"N-1"`` in order: what build_plaid_index indexes (tests, engine benches). docs.parquet keeps each
    text (a token-id list as its ids joined by spaces), so the index is searched and changed like any other."""

    needs_encoder_for_docs = False

    def __init__(self, items: Iterable):
        self.items = items if isinstance(items, Sequence) else list(items)
        self.digests = DocDigests().extend(self.items).array()

    def fingerprint(self) -> dict[str, Any]:
        return {"num_docs": len(self.items), "sha256": collection_sha256(self.digests)}

    def write_docs(self, work: Path, encoder: Any = None) -> np.ndarray:
        with DocTableWriter(work / M.DOCS_FILE) as writer:
            for pid, item in enumerate(self.items):
                writer.add(str(pid), None, item if isinstance(item, str) else " ".join(str(t) for t in item))
        return self.digests

    def plaid_items(self, work: Path) -> Sequence:
        return self.items
