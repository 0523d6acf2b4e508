"""The one qrels reader (embedctl.util.qrels): formats, the grade-0 rule, and what its callers make of it."""

from __future__ import annotations

import gzip

import pytest

from embedctl.data.relations import read_relations
from embedctl.errors import InputError
from embedctl.eval import io as eval_io
from embedctl.util.qrels import read_qrels

BEIR = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\nq1\td3\t-1\nq2\td4\t1\n"
TREC = "q1 0 d1 2\nq1 0 d2 0\nq1 0 d3 -1\nq2 0 d4 1.0\n"
GRADED = {"q1": {"d1": 2, "d2": 0, "d3": -1}, "q2": {"d4": 1}}


@pytest.mark.parametrize("name,text", [("q.tsv", BEIR), ("q.trec", TREC)])
def test_every_label_is_kept_with_its_grade(tmp_path, name, text):
    """The grade-0 rule: grade 0 and negative grades are kept as given (as trec_eval reads them)."""
    path = tmp_path / name
    path.write_text(text)
    assert read_qrels(str(path)) == GRADED
    gz = tmp_path / (name + ".gz")
    gz.write_bytes(gzip.compress(text.encode()))
    assert read_qrels(str(gz)) == GRADED


def test_callers_share_the_reader_and_choose_relevant_themselves(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text(BEIR)
    assert eval_io.read_qrels is read_qrels  # `embedctl evaluate` and `search --qrels` read with it
    # prebatch: grade > 0 is a positive, a judged grade <= 0 a known negative (-1)
    assert read_relations(str(path), "qrels").labels == {"q1": {"d1": 2, "d2": -1, "d3": -1}, "q2": {"d4": 1}}
    assert read_relations(str(path)).fmt == "qrels"


@pytest.mark.parametrize("text,line,words", [
    ("query-id\tcorpus-id\tscore\nq1\td1\thigh\n", 2, "relevance 'high' is not an integer"),
    ("q1 0 d1 1.5\n", 1, "relevance '1.5' is not an integer"),
    ("q1 0 d1 1\nq1\td2\t1\n", 2, "expected 4 fields like the first line (TREC"),
    ("q1 d1\n", 1, "expected 4 fields"),
    ("q1 0 d1 1\nq1 0 d1 2\n", 2, "labelled twice (1 and 2)"),
    ("query-id\tcorpus-id\tscore\n\n", None, "no qrels rows"),
])
def test_bad_qrels_name_file_and_line(tmp_path, text, line, words):
    path = tmp_path / "bad.tsv"
    path.write_text(text)
    with pytest.raises(InputError, match=None) as err:
        read_qrels(str(path))
    assert words in str(err.value) and err.value.line == line


def test_same_label_twice_is_fine_and_skipping_is_prebatchs(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("q1 0 d1 1\nq1 0 d1 1\nq1 0 d2 x\n")
    with pytest.raises(InputError, match="line|:3"):
        read_qrels(str(path))
    skipped = []
    rel = read_relations(str(path), "qrels", on_error="skip", on_skip=skipped.append)
    assert rel.labels == {"q1": {"d1": 1}} and [s.line for s in skipped] == [3]
