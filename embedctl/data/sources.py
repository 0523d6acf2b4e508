"""Read text collections from local paths or any fsspec URL.

Formats (compression .gz/.zst/.bz2/.xz is inferred from the name by fsspec):

- ColBERT TSV: ``id \\t text [\\t title]`` per line. A header line (``id\\ttext...``) is skipped; when it
  names more columns (``id\\ttext\\ttitle\\tyear``), each row has them all and the extra ones are fields.
- JSONL: one object per line with ``_id`` or ``id``, ``text`` and optional ``title``; every other key is a field.
- parquet: columns ``_id``/``id``, ``text``, optional ``title``; every other column is a field.

Fields (:attr:`TextRecord.fields`: metadata an index keeps and filters on, embedctl.index.fields): scalar
values (string, integer, float, boolean) by name; a nested object is flattened to dotted names
(BEIR's ``metadata: {"year": 2015}`` -> ``metadata.year``), a list is kept as its JSON text, null as absent.
A TSV field value is a string, read as an integer or a float when it is written as one.
- BEIR folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

Every bad row raises :class:`~embedctl.errors.InputError` naming the file and the 1-based line (row),
unless ``on_error="skip"``: then the row is left out and reported through ``on_skip``.

Example::

    for rec in iter_texts("s3://bucket/corpus.jsonl.gz"):
        print(rec.id, join_title(rec))
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from embedctl.errors import InputError
from embedctl.util.fs import folder_fs, url_to_fs
from embedctl.util.lines import (
    COMPRESSIONS,
    OnSkip,
    RowError,
    Skipped,
    decode_line,
    open_url,
    read_lines,
    strip_compression,
)

TEXT_FORMATS = ("tsv", "jsonl", "parquet")
_TSV_HEADER_IDS = {"id", "_id", "pid", "qid", "docid", "doc_id", "query_id"}
_TSV_HEADER_TEXTS = {"text", "passage", "query", "document"}


@dataclass
class TextRecord:
    """One text of a collection. ``line`` is the 1-based line (or parquet row) in its source."""

    id: str
    text: str
    title: str | None
    line: int
    fields: dict[str, Any] | None = None
    """Metadata beyond id, title and text (flattened scalars by name); None when the source has none."""


_RESERVED = ("_id", "id", "text", "title")
_INT = re.compile(r"^[+-]?\d{1,18}$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def flatten_fields(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar fields by (dotted) name: nested objects flattened, lists as JSON text, nulls left out.

    >>> flatten_fields({"year": 2015, "metadata": {"journal": "Cell", "tags": ["a"]}, "x": None})
    {'year': 2015, 'metadata.journal': 'Cell', 'metadata.tags': '["a"]'}
    """
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if value is None:
            continue
        if isinstance(value, dict):
            out.update(flatten_fields(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value, ensure_ascii=False, sort_keys=True)
        elif isinstance(value, (str, bool, int, float)):
            out[name] = value
        else:  # parquet dates, decimals...: their text
            out[name] = str(value)
    return out


def tsv_value(text: str) -> Any:
    """A TSV field: an integer or a float when written as one, None when empty, else the string."""
    if text == "":
        return None
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def detect_format(url: str, fmt: str = "auto") -> str:
    """Return ``tsv``, ``jsonl`` or ``parquet`` for a file URL (``fmt`` wins unless ``auto``)."""
    if fmt != "auto":
        if fmt not in TEXT_FORMATS:
            raise InputError(f"unknown text format {fmt!r}; expected one of {', '.join(TEXT_FORMATS)}", path=url)
        return fmt
    base = strip_compression(url).lower()
    if base.endswith((".tsv", ".txt", ".csv")):
        return "tsv"
    if base.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if base.endswith(".parquet"):
        return "parquet"
    raise InputError(
        "cannot tell the format from the file name",
        path=url,
        hint="name it .tsv, .jsonl or .parquet (optionally .gz/.zst), or set pretokenize.format",
    )


def _tsv_record(text: str, line: int) -> TextRecord:
    parts = text.split("\t")
    if len(parts) not in (2, 3):
        raise RowError(
            f"expected 2 or 3 tab-separated fields (id, text[, title]), found {len(parts)}",
            "escape tabs inside texts, or convert the file to JSONL",
        )
    title = parts[2] if len(parts) == 3 and parts[2] != "" else None
    return TextRecord(id=parts[0], text=parts[1], title=title, line=line)


def _json_record(text: str, line: int) -> TextRecord:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RowError(f"not valid JSON: {exc.msg} (column {exc.colno})") from exc
    if not isinstance(obj, dict):
        raise RowError(f"expected a JSON object, found {type(obj).__name__}")
    return _mapping_record(obj, line)


def _mapping_record(obj: dict, line: int) -> TextRecord:
    rid = obj.get("_id", obj.get("id"))
    if rid is None:
        raise RowError("missing the id field (`_id` or `id`)")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise RowError(f"the id must be a string or integer, found {type(rid).__name__}")
    text = obj.get("text")
    if not isinstance(text, str):
        raise RowError("missing the `text` field (a string)" if text is None else "`text` must be a string")
    title = obj.get("title")
    if title is not None and not isinstance(title, str):
        raise RowError("`title` must be a string")
    fields = flatten_fields({k: v for k, v in obj.items() if k not in _RESERVED})
    return TextRecord(id=str(rid), text=text, title=title or None, line=line, fields=fields or None)


def _tsv_header_record(header: list[str]):
    """The row parser of a TSV whose header names its columns: id, text, then title and fields in any order."""
    names = header[2:]

    def parse(text: str, line: int) -> TextRecord:
        parts = text.split("\t")
        if len(parts) != len(header):
            raise RowError(f"expected {len(header)} tab-separated fields (the header's: {', '.join(header)}), "
                           f"found {len(parts)}", "escape tabs inside texts, or convert the file to JSONL")
        title = None
        fields: dict[str, Any] = {}
        for name, value in zip(names, parts[2:], strict=True):
            if name.lower() == "title":
                title = value or None
            elif (v := tsv_value(value)) is not None:
                fields[name] = v
        return TextRecord(id=parts[0], text=parts[1], title=title, line=line, fields=fields or None)

    return parse


def is_control_char(c: str) -> bool:
    """C0, DEL and C1 controls (\\x9b starts an escape sequence on a terminal, \\x85 is a line break to
    str.splitlines) and the Unicode line / paragraph separators, which str.splitlines also breaks on."""
    o = ord(c)
    return o < 32 or 127 <= o < 160 or o in (0x2028, 0x2029)


def _check(rec: TextRecord, allow_empty: bool = False) -> TextRecord:
    if rec.id.strip() == "":
        raise RowError("empty id")
    bad = next((c for c in rec.id if is_control_char(c)), None)
    if bad is not None:  # every ranking, id and qrels file embedctl writes or reads is tab- and line-separated
        raise RowError(f"the id {rec.id!r} holds a control character ({bad!r}): rankings, id files and qrels "
                       "separate fields by tabs and rows by newlines, so no reader could read it back",
                       "remove tabs, newlines and other control characters from the ids")
    if not allow_empty and rec.text.strip() == "" and not (rec.title or "").strip():
        raise RowError(f"empty text for id {rec.id!r}", "remove the row or fill in its text")
    return rec


def _is_tsv_header(text: str) -> bool:
    parts = text.lower().split("\t")
    return len(parts) >= 2 and parts[0] in _TSV_HEADER_IDS and parts[1] in _TSV_HEADER_TEXTS


def _iter_line_records(url: str, fmt: str, allow_empty: bool = False) -> Iterator[tuple[int, TextRecord | RowError]]:
    parse = _tsv_record if fmt == "tsv" else _json_record
    for n, raw in read_lines(url):
        try:
            text = decode_line(raw)
            if n == 1 and text.startswith("\ufeff"):
                text = text[1:]
            if text.strip() == "":
                raise RowError("empty line")
            if n == 1 and fmt == "tsv" and _is_tsv_header(text):
                header = text.rstrip("\r").split("\t")
                if len(header) > 2 and not (len(header) == 3 and header[2].lower() == "title"):
                    parse = _tsv_header_record(header)
                continue
            yield n, _check(parse(text, n), allow_empty)
        except RowError as err:
            yield n, err


def _iter_parquet_records(url: str, allow_empty: bool = False) -> Iterator[tuple[int, TextRecord | RowError]]:
    import pyarrow.parquet as pq

    fh = open_url(url, "rb", compression=None)
    try:
        try:
            pf = pq.ParquetFile(fh)
        except Exception as exc:
            raise InputError(f"not a readable parquet file: {exc}", path=url) from exc
        names = set(pf.schema_arrow.names)
        id_col = "_id" if "_id" in names else "id"
        if id_col not in names or "text" not in names:
            raise InputError(
                f"parquet columns {sorted(names)} lack `_id`/`id` and `text`", path=url,
                hint="rename the columns to id, text[, title]",
            )
        row = 0
        for batch in pf.iter_batches(batch_size=8192):
            for obj in batch.to_pylist():
                row += 1
                obj["id"] = obj.pop(id_col)
                obj.pop("_id", None)
                try:
                    yield row, _check(_mapping_record(obj, row), allow_empty)
                except RowError as err:
                    yield row, err
    finally:
        fh.close()


def iter_texts(
    url: str, fmt: str = "auto", *, on_error: str = "fail", on_skip: OnSkip | None = None,
    check_duplicates: bool = True, allow_empty: bool = False, skip_flag: str | None = None,
) -> Iterator[TextRecord]:
    """Yield the records of a TSV/JSONL/parquet text file (local path or fsspec URL).

    Bad rows (malformed line, invalid UTF-8, missing field, empty text, duplicate id) raise InputError
    with file and line; with ``on_error="skip"`` they are passed to ``on_skip`` and left out.
    An input without any record raises InputError. ``allow_empty``: a record whose title and text are
    both empty is kept (encoded as an empty text, as sentence-transformers and BEIR do). ``skip_flag``: the
    caller's flag that skips bad rows (e.g. ``--on-error skip``), named in the hint; None names none.
    """
    fmt = detect_format(url, fmt)
    rows = _iter_parquet_records(url, allow_empty) if fmt == "parquet" else _iter_line_records(url, fmt, allow_empty)
    seen: dict[str, int] = {}
    count = 0
    for n, item in rows:
        if not isinstance(item, RowError) and check_duplicates:
            first = seen.setdefault(item.id, n)
            if first != n:
                item = RowError(f"duplicate id {item.id!r} (first seen on line {first})", "ids must be unique")
        if isinstance(item, RowError):
            if on_error != "skip":
                hint = item.hint or "fix the row"
                if skip_flag:
                    hint += f", or pass {skip_flag}" if not item.hint else f"; or pass {skip_flag}"
                raise InputError(item.reason, path=url, line=n, hint=hint)
            if on_skip is not None:
                on_skip(Skipped(url, n, item.reason))
            continue
        count += 1
        yield item
    if count == 0:
        raise InputError("the input holds no records", path=url, hint="check that the file is the intended one")


def join_title(record: TextRecord, use_title: bool = True, sep: str = " ") -> str:
    """The text the model sees: ``title + sep + text`` when there is a title (and ``use_title``)."""
    if use_title and record.title:
        return f"{record.title}{sep}{record.text}" if record.text else record.title
    return record.text


def read_queries(url: str) -> dict[str, str]:
    """TSV (``qid \\t text``) or JSONL queries -> ``{qid: text}`` (in file order)."""
    return {rec.id: rec.text for rec in iter_texts(url)}


def beir_paths(folder: str, split: str = "test") -> tuple[str, str, str]:
    """``(corpus.jsonl, queries.jsonl, qrels/<split>.tsv)`` of a BEIR folder (also .gz/.zst variants)."""
    fs, _ = url_to_fs(folder)
    base = folder.rstrip("/")

    def pick(name: str) -> str:
        for ext in ("", *COMPRESSIONS):
            candidate = f"{base}/{name}{ext}"
            if fs.exists(url_to_fs(candidate)[1]):
                return candidate
        return f"{base}/{name}"

    return pick("corpus.jsonl"), pick("queries.jsonl"), pick(f"qrels/{split}.tsv")


def is_beir_folder(url: str) -> bool:
    """True when ``url`` is a folder holding corpus.jsonl (or a compressed variant)."""
    found = folder_fs(url)
    if found is None:
        return False
    fs = found[0]
    corpus = beir_paths(url)[0]
    return fs.exists(url_to_fs(corpus)[1])
