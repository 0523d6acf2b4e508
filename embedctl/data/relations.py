"""Relevance labels for prebatch: qrels, query-document pair tables, triples / hard-negative lists.

Formats (``fmt="auto"`` decides from the file):

- ``qrels``: BEIR TSV with a header (``query-id corpus-id score``) or TREC (``qid 0 docid rel``,
  whitespace separated), read row by row by the one qrels reader (:mod:`embedctl.util.qrels`), which keeps
  every grade as given; here grades > 0 are kept and a grade <= 0 (judged not relevant) becomes -1.
- ``pairs``: ``qid \\t docid`` lines, or JSONL / parquet ``{"query_id", "doc_id"}``: every pair relevance 1.
- ``triples``: ``qid \\t positive \\t negative`` lines (ColBERT triples, no header), or JSONL
  ``{"query_id", "positives": [...], "negatives": [...]}``: positives 1, negatives -1.

When one pair is labelled twice the positive label wins (the highest grade), so an explicit
positive is never turned into a negative by a noisy negative list.

Example::

    rel = read_relations("scifact/qrels/train.tsv")
    rel.labels["0"] == {"31715818": 1}
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from embedctl.errors import InputError
from embedctl.util.lines import (
    OnSkip,
    RowError,
    Skipped,
    decode_line,
    open_url,
    read_lines,
    split_fields,
    strip_compression,
)
from embedctl.util.qrels import parse_grade, qrels_rows

RELATION_FORMATS = ("qrels", "pairs", "triples")
_QID_HEADERS = {"query-id", "query_id", "qid", "query"}


@dataclass
class Relations:
    """``labels[qid][docid] = relevance`` (int, > 0 relevant, < 0 known irrelevant), in file order.

    ``lines[(qid, docid)]`` is the first line that named the pair (for error messages).
    """

    path: str
    fmt: str
    labels: dict[str, dict[str, int]] = field(default_factory=dict)
    lines: dict[tuple[str, str], int] = field(default_factory=dict)
    rows: int = 0

    def add(self, qid: str, docid: str, rel: int, line: int) -> None:
        per_q = self.labels.setdefault(qid, {})
        old = per_q.get(docid)
        per_q[docid] = rel if old is None else max(old, rel)
        self.lines.setdefault((qid, docid), line)
        self.rows += 1


def _label(grade: int) -> int:
    """Prebatch's label of a qrels grade: relevant (> 0) as given, judged not relevant (<= 0) -1."""
    return grade if grade > 0 else -1


def _is_jsonl(url: str) -> bool:
    return strip_compression(url).lower().endswith((".jsonl", ".json", ".ndjson"))


def _sniff(url: str) -> str:
    """Decide the relations format from the first non-empty line."""
    if _is_jsonl(url):
        for _, raw in read_lines(url):
            if raw.strip():
                try:
                    obj = json.loads(decode_line(raw))
                except (json.JSONDecodeError, RowError):
                    return "pairs"
                return "triples" if isinstance(obj, dict) and ("positives" in obj or "negatives" in obj) else "pairs"
        return "pairs"
    for _, raw in read_lines(url):
        try:
            parts = split_fields(decode_line(raw))
        except RowError:
            return "qrels"
        if not parts:
            continue
        if parts[0].lower() in _QID_HEADERS and len(parts) == 3:
            return "qrels"
        return {2: "pairs", 3: "triples"}.get(len(parts), "qrels")
    return "qrels"


def _tsv_rows(url: str, fmt: str) -> Iterator[tuple[int, list[tuple[str, str, int]] | RowError]]:
    if fmt == "qrels":
        for n, item in qrels_rows(url):
            yield n, item if isinstance(item, RowError) else [(item[0], item[1], _label(item[2]))]
        return
    for n, raw in read_lines(url):
        try:
            text = decode_line(raw)
            parts = split_fields(text)
            if not parts:
                continue
            if n == 1 and parts[0].lower() in _QID_HEADERS:
                continue  # header line
            yield n, _parse_tsv(parts, fmt)
        except RowError as err:
            yield n, err


def _parse_tsv(parts: list[str], fmt: str) -> list[tuple[str, str, int]]:
    """A pairs or triples row (qrels rows are read by :func:`embedctl.util.qrels.qrels_rows`)."""
    if fmt == "pairs":
        if len(parts) != 2:
            raise RowError(f"expected 2 fields (query id, document id), found {len(parts)}")
        return [(parts[0], parts[1], 1)]
    if len(parts) != 3:
        raise RowError(f"expected 3 fields (query id, positive id, negative id), found {len(parts)}")
    return [(parts[0], parts[1], 1), (parts[0], parts[2], -1)]


def _jsonl_rows(url: str, fmt: str) -> Iterator[tuple[int, list[tuple[str, str, int]] | RowError]]:
    for n, raw in read_lines(url):
        try:
            text = decode_line(raw)
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RowError(f"not valid JSON: {exc.msg} (column {exc.colno})") from exc
            if not isinstance(obj, dict):
                raise RowError(f"expected a JSON object, found {type(obj).__name__}")
            yield n, _parse_json(obj, fmt)
        except RowError as err:
            yield n, err


def _id(obj: dict, *keys: str) -> str:
    for k in keys:
        if k in obj and obj[k] is not None and not isinstance(obj[k], (bool, list, dict)):
            return str(obj[k])
    raise RowError(f"missing the field `{keys[0]}`")


def _id_list(obj: dict, key: str) -> list[str]:
    value = obj.get(key, [])
    if not isinstance(value, list) or any(isinstance(v, (bool, list, dict)) or v is None for v in value):
        raise RowError(f"`{key}` must be a list of ids")
    return [str(v) for v in value]


def _parse_json(obj: dict, fmt: str) -> list[tuple[str, str, int]]:
    qid = _id(obj, "query_id", "query-id", "qid")
    if fmt == "triples":
        out = [(qid, d, 1) for d in _id_list(obj, "positives")]
        out += [(qid, d, -1) for d in _id_list(obj, "negatives")]
        if not out:
            raise RowError("no `positives` and no `negatives`")
        return out
    docid = _id(obj, "doc_id", "corpus-id", "corpus_id", "docid", "document_id")
    rel = 1
    if fmt == "qrels" or "relevance" in obj or "score" in obj:
        rel = _label(parse_grade(str(obj.get("relevance", obj.get("score", 1)))))
    return [(qid, docid, rel)]


def _is_parquet(url: str) -> bool:
    return url.lower().endswith(".parquet")


def _parquet_rows(url: str, fmt: str) -> Iterator[tuple[int, list[tuple[str, str, int]] | RowError]]:
    """Rows of a parquet label table (same column names as the JSONL forms); row numbers are 1-based."""
    import pyarrow.parquet as pq

    fh = open_url(url, "rb", compression=None)
    try:
        try:
            pf = pq.ParquetFile(fh)
        except Exception as exc:
            raise InputError(f"not a readable parquet file: {exc}", path=url) from exc
        row = 0
        for batch in pf.iter_batches(batch_size=8192):
            for obj in batch.to_pylist():
                row += 1
                try:
                    yield row, _parse_json(obj, fmt)
                except RowError as err:
                    yield row, err
    finally:
        fh.close()


def _sniff_parquet(url: str) -> str:
    import pyarrow.parquet as pq

    fh = open_url(url, "rb", compression=None)
    try:
        names = set(pq.read_schema(fh).names)
    except Exception as exc:
        raise InputError(f"not a readable parquet file: {exc}", path=url) from exc
    finally:
        fh.close()
    if names & {"positives", "negatives"}:
        return "triples"
    return "qrels" if names & {"relevance", "score"} else "pairs"


def read_relations(url: str, fmt: str = "auto", *, on_error: str = "fail", on_skip: OnSkip | None = None) -> Relations:
    """Read relevance labels; bad lines raise InputError with file and line (or are skipped).

    Files: TSV/whitespace text, JSONL, or parquet (columns as in the JSONL forms), optionally compressed.
    """
    if fmt == "auto":
        fmt = _sniff_parquet(url) if _is_parquet(url) else _sniff(url)
    if fmt not in RELATION_FORMATS:
        raise InputError(f"unknown relations format {fmt!r}; expected one of {', '.join(RELATION_FORMATS)}", path=url)
    rel = Relations(path=url, fmt=fmt)
    if _is_parquet(url):
        rows = _parquet_rows(url, fmt)
    else:
        rows = _jsonl_rows(url, fmt) if _is_jsonl(url) else _tsv_rows(url, fmt)
    for n, item in rows:
        if isinstance(item, RowError):
            if on_error != "skip":
                raise InputError(item.reason, path=url, line=n, hint=item.hint or f"fix the line (format: {fmt})")
            if on_skip is not None:
                on_skip(Skipped(url, n, item.reason))
            continue
        for qid, docid, grade in item:
            rel.add(qid, docid, grade, n)
    if not rel.labels:
        raise InputError("the relations file holds no labels", path=url, hint="check that it is the intended file")
    return rel
