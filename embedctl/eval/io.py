"""Ranking (run) files: read for `embedctl evaluate`, written by `embedctl search`.

Formats (ids are strings and kept verbatim; tab-separated lines split on tabs, others on whitespace):
- ColBERT ranking: ``qid \\t pid \\t rank \\t score`` (``qid \\t pid \\t rank`` also read: score = -rank);
- TREC run: ``qid Q0 docid rank score tag``.
Files may be local paths or fsspec URLs, optionally compressed (.gz, .zst).
Qrels are read by the one qrels reader, :func:`embedctl.util.qrels.read_qrels` (TREC or BEIR; every grade
kept as given), named here too so ranking and qrels IO import from one place.

Example::

    run = read_run("ranking.tsv")          # {"q1": {"d7": 12.5, "d3": 11.0}, ...}
    qrels = read_qrels("qrels/test.tsv")   # {"q1": {"d7": 1}, ...}
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from embedctl.errors import InputError
from embedctl.util import atomic
from embedctl.util.fs import is_local, url_to_fs
from embedctl.util.lines import split_fields
from embedctl.util.qrels import read_qrels

__all__ = ["RUN_FORMATS", "format_run", "read_qrels", "read_run", "write_run"]

RUN_FORMATS = ("colbert", "trec")


def _lines(url: str) -> Iterator[tuple[int, list[str]]]:
    """Yield (1-based line number, fields) for every non-blank line of a text file."""
    fs, path = url_to_fs(url)
    if not fs.exists(path):
        raise InputError("file not found", path=url, hint="check the path (local path or fsspec URL)")
    if fs.isdir(path):
        raise InputError("expected a file, found a folder", path=url,
                         hint="name the ranking file itself, e.g. FOLDER/ranking.tsv")
    try:
        with fs.open(path, "rt", encoding="utf-8", compression="infer") as fh:
            for number, raw in enumerate(fh, start=1):
                line = raw.rstrip("\r\n")
                if not line.strip():
                    continue
                yield number, split_fields(line)
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", path=url, hint="save the file as UTF-8") from exc


def _int(text: str) -> int | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


def read_run(url: str) -> dict[str, dict[str, float]]:
    """Read a ranking: ColBERT TSV (``qid pid rank [score]``) or a TREC run (``qid Q0 docid rank score tag``).

    Returns ``{qid: {docid: score}}`` (score = -rank when the file has no scores). The format is taken
    from the first line and every line must match it.
    """
    run: dict[str, dict[str, float]] = {}
    width: int | None = None
    for number, fields in _lines(url):
        if width is None:
            if len(fields) not in (3, 4, 6):
                raise InputError(f"expected a ColBERT ranking (qid, pid, rank[, score]) or a TREC run "
                                 f"(qid Q0 docid rank score tag), got {len(fields)} fields", path=url, line=number)
            width = len(fields)
        if len(fields) != width:
            raise InputError(f"expected {width} fields like the first line, got {len(fields)}", path=url, line=number)
        if width == 6:
            qid, _, docid, rank, score, _ = fields
        else:
            qid, docid, rank = fields[:3]
            score = fields[3] if width == 4 else None
        value = _score(rank, score, url, number)
        docs = run.setdefault(qid, {})
        if docid in docs:
            raise InputError(f"query {qid!r} ranks document {docid!r} twice", path=url, line=number,
                             hint="a ranking lists each document at most once per query")
        docs[docid] = value
    if not run:
        raise InputError("the ranking is empty", path=url, hint="write it with `embedctl search --queries Q --output R`")
    return run


def _score(rank: str, score: str | None, url: str, number: int) -> float:
    rank_value = _int(rank)
    if rank_value is None:
        raise InputError(f"rank {rank!r} is not an integer", path=url, line=number,
                         hint="each row is `qid pid rank score` (ColBERT TSV) or a TREC run row; fix or remove the row")
    if score is None:
        return float(-rank_value)
    try:
        value = float(score)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise InputError(f"score {score!r} is not a finite number", path=url, line=number,
                         hint="a NaN or infinite score ranks nothing: rerun the search that wrote it, or remove the row")
    return value


def format_run(rankings: Iterable[tuple[str, Sequence[tuple[str, float]]]], fmt: str = "colbert",
               tag: str = "embedctl") -> Iterator[str]:
    """Lines of a ranking file; ``rankings`` yields (qid, [(docid, score), ...] best first); ranks 1..n.

    >>> list(format_run([("q1", [("d7", 2.5)])]))
    ['q1\\td7\\t1\\t2.5\\n']
    """
    if fmt not in RUN_FORMATS:
        raise InputError(f"unknown ranking format {fmt!r}", hint="use colbert or trec")
    for qid, hits in rankings:
        for rank, (docid, score) in enumerate(hits, start=1):
            if fmt == "trec":
                yield f"{qid} Q0 {docid} {rank} {float(score):.9g} {tag}\n"
            else:
                yield f"{qid}\t{docid}\t{rank}\t{float(score):.9g}\n"


def write_run(url: str, rankings: Iterable[tuple[str, Sequence[tuple[str, float]]]], fmt: str = "colbert",
              tag: str = "embedctl") -> int:
    """Write a ranking file (local: temp name + rename; URL: fsspec). Returns the number of lines.

    TREC format needs ids without whitespace; such an id raises InputError.
    """
    buf = io.StringIO()
    count = 0
    for line in format_run(rankings, fmt, tag):
        if fmt == "trec" and len(line.split()) != 6:
            raise InputError(f"an id contains whitespace, which a TREC run cannot hold: {line.strip()!r}",
                             hint="use --format colbert (tab-separated) for such ids")
        buf.write(line)
        count += 1
    data = buf.getvalue().encode("utf-8")
    if is_local(url):
        atomic.write_bytes(Path(url.removeprefix("file://")), data)
    else:
        fs, path = url_to_fs(url)
        with fs.open(path, "wb") as fh:
            fh.write(data)
    return count
