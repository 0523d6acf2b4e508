"""Which kind of file a path holds, from its first lines: a ranking (run) or qrels.

Why: `embedctl evaluate --run QRELS --qrels RANKING` (the two swapped) failed with "relevance '0.26' is not
an integer", true but not what to do. A ranking's rows carry a rank and a real-valued score (ColBERT
`qid pid rank score`, TREC `qid Q0 docid rank score tag`); qrels rows carry an integer grade (TREC
`qid 0 docid rel`, BEIR `query-id corpus-id score` after its header).
"""

from __future__ import annotations

from embedctl.util.lines import read_lines

SAMPLE = 20


def _is_int(text: str) -> bool:
    try:
        return float(text) == int(float(text))
    except ValueError:
        return False


def _is_fraction(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return value != int(value)


def file_kind(path: str) -> str | None:
    """``"ranking"``, ``"qrels"`` or None (unreadable, empty, or neither clearly)."""
    try:
        rows = []
        for number, raw in read_lines(path):
            line = raw.decode("utf-8", "replace")
            if line.strip():
                rows.append(line.split("\t") if "\t" in line else line.split())
            if len(rows) >= SAMPLE or number > 10 * SAMPLE:
                break
    except Exception:  # noqa: BLE001 - a sniff never replaces the reader's own error
        return None
    if not rows:
        return None
    if rows[0][:2] == ["query-id", "corpus-id"]:
        return "qrels"
    if all(len(r) == 6 and r[1] == "Q0" for r in rows):
        return "ranking"
    if all(len(r) == 4 for r in rows):
        if any(_is_fraction(r[3]) for r in rows) and all(_is_int(r[2]) for r in rows):
            return "ranking"   # qid pid rank score
        if all(r[1] == "0" and _is_int(r[3]) for r in rows):
            return "qrels"     # qid 0 docid rel
    if all(len(r) == 3 for r in rows) and all(_is_int(r[2]) for r in rows):
        return "qrels"
    return None
