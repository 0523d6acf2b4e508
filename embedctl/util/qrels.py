"""Qrels files (relevance judgments): the one reader, for `embedctl evaluate`, `search --qrels`, training
eval and prebatch.

Formats (tab-separated lines split on tabs, others on whitespace; ids kept verbatim; local paths or
fsspec URLs, optionally compressed):
- TREC: ``qid 0 docid rel``;
- BEIR: ``query-id \\t corpus-id \\t score`` with a header line.
The first line decides the format (4 fields TREC, 3 BEIR) and every line must match it; the first line
is a header when its grade field is not a number (``score``).

Grade 0: every label is kept with its grade exactly as the file gives it, 0 (judged not relevant) and
negative grades included, as trec_eval reads them. A caller that wants the relevant documents only keeps
grade > 0 itself: the metrics (embedctl.eval.metrics) count grade > 0 as relevant; prebatch
(embedctl.data.relations) stores grade <= 0 as -1, a known irrelevant document.

It lives in util because both data (prebatch labels) and eval (metrics) read qrels, and those two share
a layer and may not import each other.

Example::

    qrels = read_qrels("scifact/qrels/test.tsv")   # {"1": {"31715818": 1}, ...}
    relevant = {q: {d for d, g in docs.items() if g > 0} for q, docs in qrels.items()}
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from embedctl.errors import InputError
from embedctl.util.lines import RowError, decode_line, read_lines, split_fields

_FORMS = {4: "TREC: qid 0 docid rel", 3: "BEIR: query-id corpus-id score"}
_HINT = "qrels rows are `qid 0 docid rel` (TREC) or `query-id<TAB>corpus-id<TAB>score` (BEIR, header line first)"


def parse_grade(text: str) -> int:
    """A relevance grade: an integer, also written as a float with nothing after the point (``1.0``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value):
        raise RowError(f"relevance {text!r} is not an integer", _HINT)
    return int(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def qrels_rows(url: str) -> Iterator[tuple[int, tuple[str, str, int] | RowError]]:
    """``(line, (qid, docid, grade))`` for every label of a qrels file, in file order, or ``(line, RowError)``
    for a row that cannot be read (the caller fails or skips it). Blank lines and the header are left out."""
    width: int | None = None
    for number, raw in read_lines(url):
        try:
            fields = split_fields(decode_line(raw))
            if not fields:
                continue
            if width is None:
                if len(fields) not in _FORMS:
                    raise RowError(f"expected 4 fields ({_FORMS[4]}) or 3 ({_FORMS[3]}), got {len(fields)}", _HINT)
                width = len(fields)
                if not _is_number(fields[-1]):  # header line (`score`); a row's bad grade (1.5) is an error
                    continue
            if len(fields) != width:
                raise RowError(f"expected {width} fields like the first line ({_FORMS[width]}), got {len(fields)}",
                               _HINT)
            qid, docid, grade = (fields[0], fields[2], fields[3]) if width == 4 else fields
            yield number, (qid, docid, parse_grade(grade))
        except RowError as err:
            yield number, err


def read_qrels(url: str) -> dict[str, dict[str, int]]:
    """Read TREC or BEIR qrels -> ``{qid: {docid: grade}}``, every label with its grade as given (grade 0
    and negative grades kept; see the module docstring).

    Raises InputError naming file and line for a malformed row or a (query, document) labelled twice with
    different grades, and for a file without labels.
    """
    qrels: dict[str, dict[str, int]] = {}
    for number, item in qrels_rows(url):
        if isinstance(item, RowError):
            raise InputError(item.reason, path=url, line=number, hint=item.hint)
        qid, docid, grade = item
        docs = qrels.setdefault(qid, {})
        if docs.get(docid, grade) != grade:
            raise InputError(f"query {qid!r}, document {docid!r} is labelled twice ({docs[docid]} and {grade})",
                             path=url, line=number, hint="keep one label per (query, document)")
        docs[docid] = grade
    if not qrels:
        raise InputError("no qrels rows", path=url, hint="the file is empty or holds only a header")
    return qrels
